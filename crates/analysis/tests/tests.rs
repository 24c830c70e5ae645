//! The analyser's integration tests, one binary: figures checked against the
//! naive loops of Recipe 12.2.

mod reference;

mod properties;
