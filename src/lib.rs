//! kstage: a Kubernetes stage engine that plays KWOK `Stage` resources against objects.
//!
//! The modules follow the data flow:
//!
//! ```text
//!  Stage files ─► stage (compiled: selectors, jq/CEL, templates) ─► StageSet
//!                                                                      │ select + delay
//!  objects ─► cluster (store, API semantics) ◄─ sim (virtual clock) ◄──┘
//!                          ▲                      │ step i
//!                          └──── action ◄── template + patch
//! ```
//!
//! - [`stage`]: the KWOK Stage model, selectors, weights, delays, loading.
//! - [`template`]: Go templates with KWOK's functions; [`yaml`]: YAML ↔ JSON.
//! - [`patch`]: JSON, merge and strategic merge patches; finalizer ops; no-op detection.
//! - [`queue`]: the weighted delaying queue between matching and the workers.
//! - [`action`]: what one step of a Stage sends for one object.
//! - [`retry`]: failure classification and backoff.
//! - [`decide`]: the three delegated decisions as traits, with the built-in answers.
//! - [`plugin`]: the WebAssembly host for the selector, renderer and classifier plugins.
//! - [`cluster`]: the API boundary; [`cluster::store`] is the in-memory store,
//!   [`cluster::memory`] the cluster over it.
//! - [`apiserver`]: the embedded Kubernetes API server (real HTTP) over that store;
//!   [`bench`]: benchmarks against an API server.
//! - [`daemon`]: the engine against an API server through kube-rs, Stages from files and
//!   live Stage resources; [`lease`]: node leases between replicas.
//! - [`sim`]: deterministic simulation; [`explain`]: `kstage stage explain`; [`lint`]:
//!   what `kstage stage lint` warns about.
//! - [`clock`], [`rng`]: injected time and randomness; [`cli`]: the command line.

// In data-flow order: Stages in, objects matched, jobs queued, steps rendered and sent.
pub mod stage;
pub mod template;
pub mod yaml;
pub mod queue;
pub mod action;
pub mod patch;
pub mod retry;
pub mod decide;
pub mod plugin;
pub mod cluster;
pub mod apiserver;
pub mod bench;
pub mod daemon;
pub mod lease;
pub mod engine;
pub mod sim;
pub mod explain;
pub mod lint;
pub mod clock;
pub mod rng;
pub mod cli;
