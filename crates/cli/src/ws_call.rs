//! The `ws-call` subcommand: opens a WebSocket (through a gateway, or
//! straight to `shuffle-shard backend --protocol ws`), sends text messages,
//! prints each echo and closes cleanly, so that the WebSocket quick start
//! needs no client beyond this binary.

use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::Message;
use tokio_tungstenite::tungstenite::{self, http::HeaderValue};

use crate::output::{Flow, JsonLines};

const AFTER_HELP: &str = "\
It opens a WebSocket to --url (ws://HOST:PORT/PATH, HTTP/1.1 upgrade), sends \
--text as a text message --count times, prints each message that comes back \
as one JSON line (the text and its index), then closes the WebSocket with a \
close handshake. --api-key is sent as `Authorization: Bearer KEY` on the \
upgrade request.

Exit status: 0 when every message came back as sent, 1 when the upgrade was \
refused (the status is printed), the connection ended early or an echo \
differed, 2 for bad arguments.

Examples:
  shuffle-shard ws-call --url ws://127.0.0.1:8082/chat --api-key acme-secret --text hello
  shuffle-shard ws-call --url ws://127.0.0.1:9400/ --count 3   # straight to a shard";

/// Arguments of `shuffle-shard ws-call`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct WsCallArgs {
    /// Where to connect: a gateway's plaintext listener or an echo backend, `ws://HOST:PORT/PATH`
    #[arg(long, value_name = "URL")]
    url: String,
    /// The tenant's API key, sent as `Authorization: Bearer KEY`
    #[arg(long, value_name = "KEY")]
    api_key: Option<String>,
    /// The text of each message
    #[arg(long, default_value = "hello")]
    text: String,
    /// How many messages to send
    #[arg(long, value_name = "N", default_value_t = 1)]
    count: u32,
    /// How long the whole exchange may take
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    timeout_ms: u64,
}

/// The error behind exit status 1: the WebSocket was asked for correctly
/// but the exchange did not complete as an echo.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct EchoFailed(String);

/// One echo as printed.
#[derive(Debug, Serialize)]
struct Printed<'a> {
    text: &'a str,
    index: u32,
}

/// Runs `shuffle-shard ws-call`.
pub fn run(args: WsCallArgs) -> Result<()> {
    let mut request = args.url.as_str().into_client_request().with_context(|| {
        format!(
            "--url {:?} is not a WebSocket URL; write ws://HOST:PORT/PATH",
            args.url
        )
    })?;
    if let Some(key) = &args.api_key {
        let value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
            anyhow::anyhow!(
                "--api-key holds a character a header cannot carry; use printable ASCII"
            )
        })?;
        request.headers_mut().insert("authorization", value);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let timeout = Duration::from_millis(args.timeout_ms);
    runtime.block_on(async {
        tokio::time::timeout(timeout, exchange(request, &args))
            .await
            .unwrap_or_else(|_| {
                Err(EchoFailed(format!(
                    "no complete echo within --timeout-ms {}",
                    args.timeout_ms
                ))
                .into())
            })
    })
}

/// Connects, sends, prints the echoes and closes.
async fn exchange(
    request: tungstenite::handshake::client::Request,
    args: &WsCallArgs,
) -> Result<()> {
    let (mut socket, _) = tokio_tungstenite::connect_async(request)
        .await
        .map_err(|error| match error {
            tungstenite::Error::Http(response) => EchoFailed(format!(
                "{} answered {} instead of switching to a WebSocket",
                args.url,
                response.status()
            )),
            other => EchoFailed(format!("cannot open a WebSocket to {}: {other}", args.url)),
        })?;
    let mut out = JsonLines::stdout();
    for index in 0..args.count {
        socket
            .send(Message::text(args.text.clone()))
            .await
            .map_err(|error| EchoFailed(format!("cannot send message {index}: {error}")))?;
        let echo = loop {
            match socket.next().await {
                Some(Ok(Message::Text(text))) => break text,
                // Pings are answered by tungstenite; nothing else is ours.
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                Some(Ok(other)) => {
                    return Err(EchoFailed(format!(
                        "message {index} came back as {other:?}, not as text"
                    ))
                    .into());
                }
                Some(Err(error)) => {
                    return Err(
                        EchoFailed(format!("message {index} did not come back: {error}")).into(),
                    );
                }
                None => {
                    return Err(EchoFailed(format!(
                        "the connection ended before message {index} came back"
                    ))
                    .into());
                }
            }
        };
        if echo.as_str() != args.text {
            return Err(EchoFailed(format!(
                "message {index} came back as {:?}, not as sent",
                echo.as_str()
            ))
            .into());
        }
        let printed = Printed {
            text: echo.as_str(),
            index,
        };
        // Each echo as it comes, so a slow exchange shows progress.
        if out.write(&printed)? == Flow::Stop || out.flush()? == Flow::Stop {
            break;
        }
    }
    // A clean end: our close, then the peer's answering close.
    socket
        .close(None)
        .await
        .map_err(|error| EchoFailed(format!("cannot close the WebSocket: {error}")))?;
    while let Some(Ok(_)) = socket.next().await {}
    Ok(())
}
