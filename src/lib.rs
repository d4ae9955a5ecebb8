//! kstage: a Kubernetes stage engine.
//!
//! ```text
//!  stage files ──► stage (compiled selectors, templates) ──► action (what a step sends)
//!                                                               │
//!  objects ──► cluster (in-memory store) ◄── sim (virtual clock) ┘
//! ```

pub mod patch;
pub mod queue;
pub mod rng;
pub mod stage;
pub mod template;
pub mod yaml;
