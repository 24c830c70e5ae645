//! Progress on stderr for work that takes a while: a bar when the work
//! reports how far it has got, a spinner when it cannot.
//!
//! Nothing is drawn unless stderr is a terminal, so pipes, logs and tests
//! see no escape codes, and nothing is drawn for work that finishes within
//! [`DELAY`], so quick runs do not flicker.

use std::io::{self, IsTerminal};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long work runs before its progress is shown.
const DELAY: Duration = Duration::from_secs(1);

/// How often the bar redraws once shown, which also keeps the spinner and
/// the elapsed time moving while the work reports nothing.
const TICK: Duration = Duration::from_millis(120);

/// Shown until the work reports a total.
const SPINNER: &str = "{spinner} {msg} {elapsed}";

/// Shown once the work reports how far it has got.
const BAR: &str = "{msg} [{wide_bar}] {human_pos}/{human_len} {elapsed} (eta {eta})";

/// The same for work that reports in thousandths rather than in things.
const PERMILLE_BAR: &str = "{msg} [{wide_bar}] {per_mille} {elapsed} (eta {eta})";

/// The library's progress callback: `(done, total)`.
pub type Report<'a> = &'a (dyn Fn(u64, u64) + Sync);

/// Runs `work`, handing it a callback to report `(done, total)` through, and
/// shows a spinner labelled `message` if the work takes longer than
/// [`DELAY`] and stderr is a terminal; the spinner becomes a bar once the
/// work reports a total. The bar is cleared when the work ends.
pub fn with_progress<T>(message: &str, work: impl FnOnce(Report<'_>) -> T) -> T {
    show(message, BAR, work)
}

/// [`with_progress`] for work that reports `(done, total)` in units that
/// mean nothing to a reader (a plan's thousandths of a candidate): the bar
/// shows a percentage instead of the counts.
pub fn with_percent_progress<T>(message: &str, work: impl FnOnce(Report<'_>) -> T) -> T {
    show(message, PERMILLE_BAR, work)
}

fn show<T>(message: &str, template: &'static str, work: impl FnOnce(Report<'_>) -> T) -> T {
    if !io::stderr().is_terminal() {
        return work(&|_, _| {});
    }
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden())
        .with_style(style(SPINNER))
        .with_message(message.to_owned());
    let (finished, wait) = mpsc::channel::<()>();
    let bar = &bar;
    thread::scope(|scope| {
        scope.spawn(move || {
            // The sender is dropped when the work ends; a timeout means it
            // is still running after DELAY and deserves a bar.
            if let Err(RecvTimeoutError::Timeout) = wait.recv_timeout(DELAY) {
                bar.set_draw_target(ProgressDrawTarget::stderr());
                bar.enable_steady_tick(TICK);
                let _ = wait.recv();
            }
            bar.finish_and_clear();
        });
        let report = |done: u64, total: u64| {
            if bar.length() != Some(total) {
                bar.set_style(style(template));
                bar.set_length(total);
            }
            bar.set_position(done);
        };
        let result = work(&report);
        drop(finished);
        result
    })
}

/// The analysers' steps, each with [`with_progress`].
pub struct Bars;

impl analysis::answers::Progress for Bars {
    fn step<T>(&self, message: &str, work: impl FnOnce(Report<'_>) -> T) -> T {
        with_progress(message, work)
    }

    fn step_in_thousandths<T>(&self, message: &str, work: impl FnOnce(Report<'_>) -> T) -> T {
        with_percent_progress(message, work)
    }
}

/// A style from a template, falling back to the default bar if the
/// template were ever rejected: a progress bar must never stop the work.
fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template)
        .map(|style| {
            style.with_key(
                "per_mille",
                |state: &indicatif::ProgressState, out: &mut dyn std::fmt::Write| {
                    let total = state.len().unwrap_or(0).max(1);
                    let _ = write!(out, "{:.1}%", state.pos() as f64 * 100.0 / total as f64);
                },
            )
        })
        .unwrap_or_else(|_| ProgressStyle::default_bar())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_parse() {
        // A rejected template would silently fall back to the default; check
        // the real ones are accepted.
        for template in [SPINNER, BAR, PERMILLE_BAR] {
            assert!(ProgressStyle::with_template(template).is_ok(), "{template}");
        }
    }

    #[test]
    fn work_runs_once_and_its_result_comes_back() {
        let calls = std::sync::atomic::AtomicU64::new(0);
        let result = with_progress("test", |report| {
            report(1, 2);
            report(2, 2);
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            7
        });
        assert_eq!(result, 7);
        assert_eq!(calls.into_inner(), 1);
    }
}
