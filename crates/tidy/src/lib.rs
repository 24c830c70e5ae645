//! The house rules of this workspace, checked over its source tree by
//! `tests/tidy.rs` (in the manner of rust-analyzer's tidy tests): a rule a
//! test cannot check tends to erode. The crate has no code of its own.
