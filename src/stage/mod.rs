//! The KWOK Stage model: the wire format, compiled selectors, weight and delay.

pub mod error;
pub mod expr;
pub mod selector;
pub mod v1alpha1;
pub mod value;

pub use error::FieldError;
