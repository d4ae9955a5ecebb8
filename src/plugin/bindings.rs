//! Rust bindings generated from `wit/kstage-plugin.wit`.
//!
//! One world (`stage-plugin`) is generated because it holds every interface; a plugin
//! that exports only some capabilities is driven through the per-interface
//! `GuestIndices`, which look up only the interface they serve.

// The generated items are documented in the WIT file, not here.
#![allow(missing_docs)]

wasmtime::component::bindgen!({
    path: "wit",
    world: "stage-plugin",
    additional_derives: [PartialEq, Eq],
});

pub use self::kstage::plugin::host;
pub use self::kstage::plugin::types;
pub use exports::kstage::plugin::{classifier, metadata, renderer, selector};
