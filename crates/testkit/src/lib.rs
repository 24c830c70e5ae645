//! Test support shared by several crates' integration tests.
//!
//! Integration tests of two crates cannot share a module, so what more than
//! one of them needs lives here: running headless Chromium, writing a
//! gateway configuration, and reading JSON answers.

pub mod browser;
pub mod gateway_toml;
pub mod json;
