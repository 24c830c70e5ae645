//! Test support shared by several crates' integration tests.
//!
//! Integration tests of two crates cannot share a module, so what more than
//! one of them needs lives here: today, running headless Chromium.

pub mod browser;
