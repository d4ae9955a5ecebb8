#![warn(missing_docs)]
//! kstage: a Kubernetes stage engine that plays KWOK `Stage` resources against objects.
//!
//! The modules follow the data flow:
//!
//! ```text
//!  Stage sources ─► stage (compiled: selectors, jq/CEL, templates) ─► StageSet
//!  (files, CRs)                                                          │
//!  cluster watch ─► engine: matcher ─► queue ─► workers ─► applier ─► cluster API
//!                   select + delay     lanes    step i     action:    event, patch,
//!                           ▲                   render     template   apply, delete
//!                           │                      ▲       + patch        │ failure
//!                           │                      └─ retry (classify, ◄──┘
//!                           │                         backoff)
//!  plugins beside: decide (the three decisions) ◄─ plugin (WebAssembly host)
//!  cluster below:  cluster (kube-rs, the in-memory store) ◄─ apiserver (real HTTP)
//! ```
//!
//! In that order:
//! - [`stage`]: the KWOK Stage model, selectors, weights, delays, loading.
//! - [`engine`]: matcher, workers, applier and failure handling over a [`cluster`];
//!   [`queue`]: the weighted delaying queue between matching and the workers.
//! - [`action`]: what one step of a Stage sends for one object, through [`template`]
//!   (Go templates with KWOK's functions, their addresses from [`ipam`]; [`yaml`]:
//!   YAML ↔ JSON) and [`patch`] (JSON,
//!   merge and strategic merge patches, finalizer ops, no-op detection).
//! - [`retry`]: failure classification and backoff.
//! - [`decide`]: the three delegated decisions as traits, with the built-in answers;
//!   [`plugin`]: the WebAssembly host answering them with plugins.
//! - [`cluster`]: the API boundary; [`cluster::client`] over kube-rs,
//!   [`cluster::store`] the in-memory store, [`cluster::memory`] the cluster over it;
//!   [`apiserver`]: the embedded Kubernetes API server (real HTTP) over that store.
//! - [`daemon`]: the engine against an API server, Stages from files and live Stage
//!   resources (with their status), plugins from StagePlugin resources; [`serve`]: its
//!   probes and `/metrics`; [`lease`]: node leases between replicas, [`node_ipam`]:
//!   the pod ranges of their nodes.
//! - [`sim`]: deterministic simulation; [`explain`]: `kstage stage explain`; [`lint`]:
//!   what `kstage stage lint` warns about; [`bench`](mod@bench): benchmarks against an
//!   API server.
//! - [`proc`]: what `/proc` says of a process (CPU, memory, files), for [`serve`] and
//!   [`bench`](mod@bench).
//! - [`go`]: Go's parsing and formatting of integers, durations and times;
//!   [`clock`], [`rng`]: injected time and randomness; [`cli`]: the command line.

// In data-flow order: Stages in, objects matched, jobs queued, steps rendered and sent,
// failures retried; the delegated decisions beside; the cluster below; the tools on top.
pub mod stage;
pub mod engine;
pub mod queue;
pub mod action;
pub mod template;
pub mod ipam;
pub mod yaml;
pub mod patch;
pub mod retry;
pub mod decide;
pub mod plugin;
pub mod cluster;
pub mod apiserver;
pub mod daemon;
pub mod serve;
pub mod lease;
pub mod node_ipam;
pub mod sim;
pub mod explain;
pub mod lint;
pub mod bench;
pub mod proc;
pub mod go;
pub mod clock;
pub mod rng;
pub mod fuzzing;
pub mod cli;
