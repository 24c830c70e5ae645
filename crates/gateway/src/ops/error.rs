//! The admin API's refusals: a status and a sentence, answered as JSON
//! (`{"error": …, "status": …}`), with `WWW-Authenticate` on a 401.

use axum::Json;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An admin error answered as JSON.
pub(crate) struct AdminError(pub(crate) StatusCode, pub(crate) String);

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        let body = Json(json!({ "error": self.1, "status": self.0.as_u16() }));
        let mut response = (self.0, body).into_response();
        if self.0 == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}
