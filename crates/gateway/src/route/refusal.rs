//! The gateway's own answers: every error it answers a request with,
//! shaped for an HTTP request (a JSON error) or a gRPC call (a
//! trailers-only answer), for the request path and the listeners alike.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

use crate::protocol::client_wire::json_error_body;
use crate::route::grpc::{self, Kind};
use crate::route::response::{ResponseBody, full};
use crate::syntax::grpc::Code;
use crate::upstream::body::ClientFault;

/// The answer when the client's own body failed the request.
pub(crate) fn client_fault_response(kind: Kind, fault: ClientFault) -> Response<ResponseBody> {
    match fault {
        ClientFault::TooLarge => refuse(
            kind,
            StatusCode::PAYLOAD_TOO_LARGE,
            Code::ResourceExhausted,
            "request body too large",
        ),
        ClientFault::Broken => refuse(
            kind,
            StatusCode::BAD_REQUEST,
            Code::Internal,
            "could not read the request body",
        ),
        ClientFault::Stalled => refuse(
            kind,
            StatusCode::REQUEST_TIMEOUT,
            Code::DeadlineExceeded,
            "the request body did not arrive in time",
        ),
    }
}

/// Every error the gateway itself answers a request with, shaped for its
/// `kind`: for an HTTP request the JSON error of `status`
/// ([`error_response`]); for a gRPC call a trailers-only answer with `code`
/// ([`grpc::error`]), which a gRPC client can read where it could not read
/// an error page. `message` is the same either way.
pub fn refuse(kind: Kind, status: StatusCode, code: Code, message: &str) -> Response<ResponseBody> {
    match kind {
        Kind::Http => error_response(status, message),
        Kind::Grpc => grpc::error(code, message, status),
    }
}

/// A JSON error response.
pub fn error_response(status: StatusCode, message: &str) -> Response<ResponseBody> {
    json_error(status, json_error_body(status, message))
}

/// A JSON error response whose body is already written.
pub(crate) fn json_error(status: StatusCode, body: Bytes) -> Response<ResponseBody> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
