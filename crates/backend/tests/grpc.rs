//! The gRPC mode through real sockets and a real gRPC client (tonic over
//! h2c): the health service, the demo service's unary and server-streaming
//! methods, and the faults a drill breaks it with (UNAVAILABLE, slow,
//! reset, killed, crash on poison), switched in process and through the
//! control API, which refuses the modes gRPC cannot act out.

use std::time::{Duration, Instant};

use backend::grpc::{self, Answer, CountRequest, Note};
use backend::{Backend, Mode, Protocol, Recording};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::Code;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};

async fn grpc_backend(id: &str) -> Backend {
    Backend::start_speaking(
        id,
        "127.0.0.1:0".parse().unwrap(),
        Recording::Every,
        Protocol::Grpc,
    )
    .await
    .unwrap()
}

/// A fresh connection (a mode switch may have closed the last one).
async fn channel(backend: &Backend) -> Result<Channel, tonic::transport::Error> {
    Endpoint::from_shared(backend.url())
        .unwrap()
        .connect()
        .await
}

async fn say(backend: &Backend, text: &str) -> Result<Answer, tonic::Status> {
    let channel = channel(backend)
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let mut request = tonic::Request::new(Note { text: text.into() });
    request
        .metadata_mut()
        .insert("x-shuffle-tenant", "acme".parse().unwrap());
    grpc::unary(channel, request).await
}

async fn health(backend: &Backend) -> Result<i32, tonic::Status> {
    let mut client = HealthClient::new(channel(backend).await.unwrap());
    client
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .map(|response| response.into_inner().status)
}

#[tokio::test]
async fn a_grpc_backend_serves_health_a_unary_call_and_a_stream() {
    let backend = grpc_backend("g0").await;
    assert_eq!(
        health(&backend).await.unwrap(),
        ServingStatus::Serving as i32
    );
    let answer = say(&backend, "hello").await.unwrap();
    assert_eq!(
        answer,
        Answer {
            shard: "g0".into(),
            tenant: "acme".into(),
            text: "hello".into(),
            index: 0
        }
    );
    let mut stream = grpc::count(
        channel(&backend).await.unwrap(),
        tonic::Request::new(CountRequest { n: 3 }),
    )
    .await
    .unwrap();
    let mut indices = Vec::new();
    while let Some(answer) = stream.message().await.unwrap() {
        assert_eq!(answer.shard, "g0");
        indices.push(answer.index);
    }
    assert_eq!(indices, [0, 1, 2]);
    let too_many = grpc::count(
        channel(&backend).await.unwrap(),
        tonic::Request::new(CountRequest { n: u32::MAX }),
    )
    .await
    .unwrap_err();
    assert_eq!(too_many.code(), Code::InvalidArgument, "{too_many:?}");
    // Health checks are not counted, the calls are.
    assert_eq!(backend.requests(), 3);
    let seen = backend.seen();
    assert_eq!(seen[0].path, grpc::UNARY);
    assert_eq!(seen[0].header("x-shuffle-tenant"), ["acme"]);
}

#[tokio::test]
async fn an_unknown_method_is_unimplemented_and_says_what_is_served() {
    let backend = grpc_backend("g0").await;
    let mut grpc = tonic::client::Grpc::new(channel(&backend).await.unwrap());
    grpc.ready().await.unwrap();
    let status = grpc
        .unary(
            tonic::Request::new(Note::default()),
            http::uri::PathAndQuery::from_static("/other.Service/Get"),
            tonic_prost::ProstCodec::<Note, Answer>::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented);
    assert!(status.message().contains(grpc::UNARY), "{status:?}");
}

#[tokio::test]
async fn errors_mode_answers_unavailable_to_calls_and_health_checks() {
    let backend = grpc_backend("g0").await;
    backend.set_mode("errors:503:1".parse().unwrap());
    let status = say(&backend, "x").await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let status = health(&backend).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    backend.set_mode("errors:500:0".parse().unwrap());
    say(&backend, "x").await.unwrap();
}

#[tokio::test]
async fn reset_breaks_calls_after_their_head_and_killed_refuses_them() {
    let backend = grpc_backend("g0").await;
    backend.set_mode(Mode::ResetMidResponse);
    let status = say(&backend, "x").await.unwrap_err();
    assert_ne!(status.code(), Code::Ok);
    // The health service stays up: `reset` is a data-path fault.
    assert_eq!(
        health(&backend).await.unwrap(),
        ServingStatus::Serving as i32
    );

    backend.set_mode(Mode::Killed);
    // The listener closes on the supervisor's task; poll until it has.
    let deadline = Instant::now() + Duration::from_secs(10);
    while channel(&backend).await.is_ok() {
        assert!(Instant::now() < deadline, "still listening while killed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    backend.set_mode(Mode::Healthy);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match say(&backend, "back").await {
            Ok(answer) => break assert_eq!(answer.text, "back"),
            Err(status) => assert!(Instant::now() < deadline, "not back: {status:?}"),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn slow_delays_every_call() {
    let backend = grpc_backend("g0").await;
    backend.set_mode(Mode::Slow(Duration::from_millis(200)));
    let started = Instant::now();
    say(&backend, "x").await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(200));
}

#[tokio::test]
async fn poison_metadata_crashes_the_grpc_backend() {
    let backend = grpc_backend("g0").await;
    backend.set_mode(Mode::CrashOnPoison(Duration::from_secs(60)));
    say(&backend, "fine").await.unwrap();
    let channel = channel(&backend).await.unwrap();
    let mut request = tonic::Request::new(Note::default());
    request
        .metadata_mut()
        .insert(backend::POISON_HEADER, "1".parse().unwrap());
    let status = grpc::unary(channel, request).await.unwrap_err();
    assert_ne!(status.code(), Code::Ok);
    assert_eq!(backend.crashes(), 1);
    // Down for the crash: new connections are refused.
    let deadline = Instant::now() + Duration::from_secs(10);
    while self::channel(&backend).await.is_ok() {
        assert!(Instant::now() < deadline, "still listening after the crash");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `PUT /mode` on the control API; the status and body.
async fn put_mode(control: std::net::SocketAddr, mode: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(control).await.unwrap();
    let request = format!(
        "PUT /mode HTTP/1.1\r\nhost: control\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{mode}",
        mode.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    (head[9..12].parse().unwrap(), body.to_owned())
}

#[tokio::test]
async fn the_control_api_refuses_modes_grpc_cannot_act_out() {
    let backend = grpc_backend("g0").await;
    let control = backend
        .serve_control("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let (status, body) = put_mode(control, "stall-body").await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("stall-body") && body.contains("errors:STATUS:RATE"),
        "{body}"
    );
    assert_eq!(backend.mode(), Mode::Healthy);
    let (status, body) = put_mode(control, "errors:503:1").await;
    assert_eq!(status, 204, "{body}");
    assert_eq!(
        say(&backend, "x").await.unwrap_err().code(),
        Code::Unavailable
    );
}
