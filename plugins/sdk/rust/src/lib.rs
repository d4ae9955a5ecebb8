//! Write kstage plugins in Rust.
//!
//! A kstage plugin is a WebAssembly component that exports `metadata` and any of three
//! capabilities: `selector` (which Stage an object goes to next), `renderer` (a Stage
//! step's template becomes the JSON that the step sends) and `classifier` (what to do
//! with a failed step). This crate hides the component-model plumbing: implement the
//! plain traits [`Plugin`] and any of [`Selector`], [`Renderer`], [`Classifier`] on one
//! type, then export it with [`export!`], naming the capabilities:
//!
//! ```
//! use kstage_plugin::{Candidate, Info, Object, Plugin, Selection, Selector};
//!
//! struct Heaviest;
//!
//! impl Plugin for Heaviest {
//!     fn info() -> Info {
//!         Info::new("heaviest", "0.1.0")
//!     }
//! }
//!
//! impl Selector for Heaviest {
//!     fn select(_object: &Object, candidates: &[Candidate]) -> Result<Option<Selection>, String> {
//!         // The first candidate with the highest weight, with kstage's delay.
//!         let best = candidates.iter().rev().max_by_key(|c| c.weight);
//!         Ok(best.map(|c| Selection { stage: c.name.clone(), delay_ms: None }))
//!     }
//! }
//!
//! kstage_plugin::export!(Heaviest: selector);
//! # fn main() {}
//! ```
//!
//! The component then exports `metadata` and `selector` only, so kstage keeps its
//! built-in rendering and retry classification for this plugin. The host's functions
//! are in [`host`]. Objects arrive as JSON text wrapped in [`Object`], which looks up
//! values by path without parsing the whole object (or parses it with serde_json when
//! asked).

#![warn(missing_docs)]

extern crate self as kstage_plugin;

mod object;

pub use object::{Object, json};
pub use {serde, serde_json};

pub use __private::bindings::kstage::plugin::types::{
    Candidate, Decision, Failure, FailureKind, Level, PluginInfo, Selection,
};

/// The interface version this SDK implements: the version of the `kstage:plugin`
/// WIT package it was built from. [`export!`] reports it in `metadata.info`.
pub const INTERFACE_VERSION: &str = env!("KSTAGE_PLUGIN_INTERFACE_VERSION");

/// Who a plugin is: the name kstage uses in logs and metrics, and the plugin's own
/// version. The interface version is filled in by the SDK.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Info {
    /// A short name, for logs and metrics.
    pub name: String,
    /// The plugin's own version.
    pub version: String,
}

impl Info {
    /// `Info { name, version }`.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Info {
            name: name.into(),
            version: version.into(),
        }
    }
}

/// Every plugin: who it is.
pub trait Plugin {
    /// The plugin's name and version; kstage calls it once, when it loads the plugin.
    fn info() -> Info;
}

/// Stage selection.
pub trait Selector: Plugin {
    /// Choose the next Stage for `object` among `candidates` (the Stages whose own
    /// selectors matched; never empty). `Ok(None)` plays no Stage now. A returned
    /// stage name must be one of the candidates'. `Err` is a plugin failure, handled
    /// by the plugin's failure policy.
    fn select(object: &Object, candidates: &[Candidate]) -> Result<Option<Selection>, String>;
}

/// Template rendering, instead of Go templates.
pub trait Renderer: Plugin {
    /// Render `template` (a step's `template` field as written in the Stage named
    /// `stage`) for `object`. `Ok` is the JSON text the step sends. `Err` is a
    /// plugin failure, handled by the plugin's failure policy.
    fn render(stage: &str, template: &str, object: &Object) -> Result<String, String>;
}

/// Retry classification.
pub trait Classifier: Plugin {
    /// Decide what happens to a failed step. `failure.object` is the object as JSON
    /// text; `Object::new(&failure.object)` gives the usual lookups.
    fn classify(failure: &Failure) -> Decision;
}

/// What kstage offers every plugin.
pub mod host {
    use crate::__private::bindings::kstage::plugin::host as imports;
    pub use crate::Level;

    /// Write a line to kstage's log, tagged with the plugin's name.
    pub fn log(level: Level, message: &str) {
        imports::log(level, message)
    }

    /// The engine's current time, RFC 3339 with nanoseconds (virtual in `kstage sim`).
    pub fn now() -> String {
        imports::now()
    }

    /// 64 random bits (seeded, so reproducible, in `kstage sim`).
    pub fn random() -> u64 {
        imports::random()
    }
}

/// Export a type as a kstage plugin with the capabilities listed.
///
/// ```ignore
/// kstage_plugin::export!(MyPlugin: selector, renderer);
/// ```
///
/// The type implements [`Plugin`] and, for each capability listed (`selector`,
/// `renderer`, `classifier`; any order, at least one, each once), the matching trait.
/// The component exports `metadata` and exactly the listed capabilities. Use the
/// macro once per plugin, at the top level of the crate's `lib.rs`.
#[macro_export]
macro_rules! export {
    // Collect the capabilities into three slots, whatever their order.
    (@parse $ty:ident [$($s:ident)*] [$($r:ident)*] [$($c:ident)*] selector $($rest:ident)*) => {
        $crate::export!(@parse $ty [$($s)* selector] [$($r)*] [$($c)*] $($rest)*);
    };
    (@parse $ty:ident [$($s:ident)*] [$($r:ident)*] [$($c:ident)*] renderer $($rest:ident)*) => {
        $crate::export!(@parse $ty [$($s)*] [$($r)* renderer] [$($c)*] $($rest)*);
    };
    (@parse $ty:ident [$($s:ident)*] [$($r:ident)*] [$($c:ident)*] classifier $($rest:ident)*) => {
        $crate::export!(@parse $ty [$($s)*] [$($r)*] [$($c)* classifier] $($rest)*);
    };
    (@parse $ty:ident [$($s:ident)*] [$($r:ident)*] [$($c:ident)*] $other:ident $($rest:ident)*) => {
        ::core::compile_error!(::core::concat!(
            "kstage_plugin::export!: unknown capability `", ::core::stringify!($other),
            "`; expected selector, renderer or classifier"
        ));
    };

    // One arm per combination: the listed interfaces and the matching section.
    (@parse $ty:ident [selector] [] []) => {
        $crate::export!(@emit $ty "component-type:kstage-plugin:selector" SELECTOR; selector);
    };
    (@parse $ty:ident [] [renderer] []) => {
        $crate::export!(@emit $ty "component-type:kstage-plugin:renderer" RENDERER; renderer);
    };
    (@parse $ty:ident [] [] [classifier]) => {
        $crate::export!(@emit $ty "component-type:kstage-plugin:classifier" CLASSIFIER; classifier);
    };
    (@parse $ty:ident [selector] [renderer] []) => {
        $crate::export!(@emit $ty "component-type:kstage-plugin:selector-renderer"
            SELECTOR_RENDERER; selector renderer);
    };
    (@parse $ty:ident [selector] [] [classifier]) => {
        $crate::export!(@emit $ty "component-type:kstage-plugin:selector-classifier"
            SELECTOR_CLASSIFIER; selector classifier);
    };
    (@parse $ty:ident [] [renderer] [classifier]) => {
        $crate::export!(@emit $ty "component-type:kstage-plugin:renderer-classifier"
            RENDERER_CLASSIFIER; renderer classifier);
    };
    (@parse $ty:ident [selector] [renderer] [classifier]) => {
        $crate::export!(@emit $ty "component-type:kstage-plugin:selector-renderer-classifier"
            SELECTOR_RENDERER_CLASSIFIER; selector renderer classifier);
    };
    (@parse $ty:ident [$($s:ident)*] [$($r:ident)*] [$($c:ident)*]) => {
        ::core::compile_error!("kstage_plugin::export!: a capability is listed twice");
    };

    // A plain "trait not implemented" error, before the bindings' own.
    (@implements $ty:ident $trait:ident) => {
        const _: () = {
            fn implements<T: $crate::$trait>() {}
            let _ = implements::<$ty>;
        };
    };
    (@emit $ty:ident $section:literal $types:ident; $($capability:ident)+) => {
        $crate::export!(@implements $ty Plugin);
        $crate::__export_kstage_plugin_metadata_0_1_0_cabi!(
            $ty with_types_in $crate::__private::bindings::exports::kstage::plugin::metadata
        );
        $( $crate::export!(@interface $ty $capability); )+
        const _: () = {
            // What `wasm-tools component new` reads to know the component's world.
            #[cfg(target_arch = "wasm32")]
            #[unsafe(link_section = $section)]
            #[used]
            static COMPONENT_TYPE: [u8; $crate::__private::component_types::$types.len()] =
                $crate::__private::component_types::$types;
        };
    };
    (@interface $ty:ident selector) => {
        $crate::export!(@implements $ty Selector);
        $crate::__export_kstage_plugin_selector_0_1_0_cabi!(
            $ty with_types_in $crate::__private::bindings::exports::kstage::plugin::selector
        );
    };
    (@interface $ty:ident renderer) => {
        $crate::export!(@implements $ty Renderer);
        $crate::__export_kstage_plugin_renderer_0_1_0_cabi!(
            $ty with_types_in $crate::__private::bindings::exports::kstage::plugin::renderer
        );
    };
    (@interface $ty:ident classifier) => {
        $crate::export!(@implements $ty Classifier);
        $crate::__export_kstage_plugin_classifier_0_1_0_cabi!(
            $ty with_types_in $crate::__private::bindings::exports::kstage::plugin::classifier
        );
    };

    ($ty:ident : $($capability:ident),+ $(,)?) => {
        $crate::export!(@parse $ty [] [] [] $($capability)+);
    };
    ($($other:tt)*) => {
        ::core::compile_error!(
            "usage: kstage_plugin::export!(Type: capability, ...) with capabilities \
             among selector, renderer, classifier"
        );
    };
}

/// The examples of README.md, compiled by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;

#[doc(hidden)]
pub mod __private {
    pub use wit_bindgen;

    /// One encoded world per combination of capabilities (see build.rs).
    pub mod component_types {
        include!(concat!(env!("OUT_DIR"), "/component_types.rs"));
    }

    /// The bindings of kstage's full `stage-plugin` world. Its per-interface export
    /// macros are used by `export!`; its own world-wide export macro is not.
    #[allow(missing_docs, clippy::all)]
    pub mod bindings {
        wit_bindgen::generate!({
            path: "../../../wit",
            world: "kstage:plugin/stage-plugin",
            pub_export_macro: true,
            export_macro_name: "__export_stage_plugin",
            default_bindings_module: "::kstage_plugin::__private::bindings",
            runtime_path: "::kstage_plugin::__private::wit_bindgen::rt",
        });
    }

    use crate::{Classifier, Object, Plugin, Renderer, Selector};
    use bindings::exports::kstage::plugin::{classifier, metadata, renderer, selector};
    use bindings::kstage::plugin::types::{Candidate, Decision, Failure, PluginInfo, Selection};

    impl<T: Plugin> metadata::Guest for T {
        fn info() -> PluginInfo {
            let info = T::info();
            PluginInfo {
                name: info.name,
                version: info.version,
                interface_version: crate::INTERFACE_VERSION.to_string(),
            }
        }
    }

    impl<T: Selector> selector::Guest for T {
        #[inline]
        fn select(object: String, candidates: Vec<Candidate>) -> Result<Option<Selection>, String> {
            T::select(Object::new(&object), &candidates)
        }
    }

    impl<T: Renderer> renderer::Guest for T {
        #[inline]
        fn render(stage: String, template: String, object: String) -> Result<String, String> {
            T::render(&stage, &template, Object::new(&object))
        }
    }

    impl<T: Classifier> classifier::Guest for T {
        #[inline]
        fn classify(failure: Failure) -> Decision {
            T::classify(&failure)
        }
    }
}
