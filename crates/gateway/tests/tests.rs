//! Gateway integration tests.
