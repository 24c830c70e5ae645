//! The `grpc-call` subcommand: one call to the test backend's demo gRPC
//! service (`shuffle.demo.Echo`, see `shuffle-shard backend --protocol
//! grpc`), through a gateway or straight to a shard, so that the gRPC quick
//! start needs no client beyond this binary.

use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use backend::grpc::{self, Answer, CountRequest, Note};
use clap::Args;
use serde::Serialize;
use tonic::transport::Endpoint;

use crate::output::{Flow, JsonLines};

const AFTER_HELP: &str = "\
It calls shuffle.demo.Echo/Unary (one answer) or, with --count N, \
shuffle.demo.Echo/Count (N answers as a stream) over HTTP/2 with prior \
knowledge (h2c), and prints each answer as one JSON line: the shard that \
answered, the tenant the gateway named, the text and the index in the stream. \
--api-key is sent as `authorization: Bearer KEY` metadata.

Exit status: 0 when the call ended with OK, 1 when it ended with another gRPC \
status (printed on stderr with its code and message), 2 for bad arguments.

Examples:
  shuffle-shard grpc-call --url http://127.0.0.1:8081 --api-key acme-secret --text hello
  shuffle-shard grpc-call --url http://127.0.0.1:8081 --api-key acme-secret --count 3
  shuffle-shard grpc-call --url http://127.0.0.1:9300   # straight to a shard";

/// Arguments of `shuffle-shard grpc-call`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct GrpcCallArgs {
    /// Where to call: a gateway's plaintext listener or a gRPC backend, `http://HOST:PORT`
    #[arg(long, value_name = "URL")]
    url: String,
    /// The tenant's API key, sent as `authorization: Bearer KEY`
    #[arg(long, value_name = "KEY")]
    api_key: Option<String>,
    /// The text of the unary call
    #[arg(long, default_value = "hello", conflicts_with = "count")]
    text: String,
    /// Call the server-streaming method for this many answers instead
    #[arg(long, value_name = "N")]
    count: Option<u32>,
    /// The call's deadline, sent as `grpc-timeout`
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    timeout_ms: u64,
}

/// The error behind exit status 1: the call ran and ended with a status
/// other than OK.
#[derive(Debug, thiserror::Error)]
#[error("the call ended with {code:?} ({number}): {message}")]
pub struct CallFailed {
    code: tonic::Code,
    number: i32,
    message: String,
}

impl From<tonic::Status> for CallFailed {
    fn from(status: tonic::Status) -> Self {
        Self {
            code: status.code(),
            number: status.code() as i32,
            message: status.message().to_owned(),
        }
    }
}

/// One answer as printed.
#[derive(Debug, Serialize)]
struct Printed<'a> {
    shard: &'a str,
    tenant: &'a str,
    text: &'a str,
    index: u32,
}

/// Runs `shuffle-shard grpc-call`.
pub fn run(args: GrpcCallArgs) -> Result<()> {
    let uri: http::Uri = args
        .url
        .parse()
        .ok()
        .filter(|uri: &http::Uri| uri.scheme_str() == Some("http") && uri.host().is_some())
        .ok_or_else(|| {
            anyhow!(
                "--url {:?} is not an http:// URL; give the gateway's plaintext listener, e.g. http://127.0.0.1:8081",
                args.url
            )
        })?;
    let bearer = match &args.api_key {
        Some(key) => Some(
            format!("Bearer {key}")
                .parse::<tonic::metadata::MetadataValue<_>>()
                // The key itself stays out of the message: it is a secret.
                .map_err(|_| anyhow!("--api-key holds characters a header cannot carry"))?,
        ),
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let timeout = Duration::from_millis(args.timeout_ms);
    runtime.block_on(async {
        let channel = Endpoint::from(uri.clone())
            .connect_timeout(timeout)
            .connect()
            .await
            .map_err(|error| CallFailed {
                code: tonic::Code::Unavailable,
                number: tonic::Code::Unavailable as i32,
                message: format!("cannot connect to {uri}: {error}; is it listening?"),
            })?;
        let mut out = JsonLines::stdout();
        match args.count {
            None => {
                let answer = grpc::unary(
                    channel,
                    call(
                        Note {
                            text: args.text.clone(),
                        },
                        timeout,
                        bearer.as_ref(),
                    ),
                )
                .await
                .map_err(CallFailed::from)?;
                let _: Flow = out.write(&printed(&answer))?;
            }
            Some(n) => {
                let mut answers =
                    grpc::count(channel, call(CountRequest { n }, timeout, bearer.as_ref()))
                        .await
                        .map_err(CallFailed::from)?;
                // Each answer as it comes, so a long stream shows progress.
                while let Some(answer) = answers.message().await.map_err(CallFailed::from)? {
                    if out.write(&printed(&answer))? == Flow::Stop || out.flush()? == Flow::Stop {
                        return Ok(());
                    }
                }
            }
        }
        let _: Flow = out.flush()?;
        Ok(())
    })
}

/// `message` as a call with its deadline and, when given, its credential.
fn call<T>(
    message: T,
    timeout: Duration,
    bearer: Option<&tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(timeout);
    if let Some(bearer) = bearer {
        request
            .metadata_mut()
            .insert("authorization", bearer.clone());
    }
    request
}

fn printed(answer: &Answer) -> Printed<'_> {
    Printed {
        shard: &answer.shard,
        tenant: &answer.tenant,
        text: &answer.text,
        index: answer.index,
    }
}
