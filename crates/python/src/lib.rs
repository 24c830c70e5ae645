//! The `shuffle_shard` Python package's native module, `shuffle_shard._native`:
//! placement and blast-radius analysis from the same Rust code the gateway
//! and the command line run, so a Python job scheduler, queue consumer or
//! notebook computes exactly the gateway's subsets.
//!
//! The pure-Python half (`python/shuffle_shard/`) adds the conveniences that
//! need optional packages (NumPy arrays, pandas DataFrames) and the type
//! stubs; everything that computes lives here.

mod analysing;
mod args;
mod placing;

use pyo3::prelude::*;

/// The native half of `shuffle_shard`.
#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    module.add(
        "RECIPE_KEY",
        pyo3::types::PyBytes::new(module.py(), placement::RECIPE_DEFAULT_KEY),
    )?;
    module.add_function(wrap_pyfunction!(placing::shuffle_shards, module)?)?;
    module.add_function(wrap_pyfunction!(placing::migration_diff, module)?)?;
    module.add_function(wrap_pyfunction!(analysing::blast, module)?)?;
    module.add_function(wrap_pyfunction!(analysing::plan, module)?)?;
    module.add_function(wrap_pyfunction!(analysing::migrate, module)?)?;
    module.add_class::<placing::Placer>()?;
    module.add_class::<placing::KeyRing>()?;
    Ok(())
}
