//! Plugin components written in WAT and turned into components with `wit-component`, so
//! the host's tests need no guest toolchain. Each fixture implements the canonical ABI
//! by hand for exactly the exports it declares.

use std::path::Path;

use wit_component::{ComponentEncoder, StringEncoding};
use wit_parser::Resolve;

/// How a fixture's `classify` behaves.
#[derive(Debug, Clone, Copy)]
pub enum Classify {
    /// 429 → retry-after(1234 ms); attempt >= 2 → drop(true); else backoff.
    Policy,
    /// Never returns.
    Loop,
    /// Grows its memory until refused.
    Hog,
    /// `unreachable`.
    Trap,
    /// Calls the host's `log` [`CHATTY_LINES`] times with a 32 KiB message, then
    /// answers backoff.
    Chatty,
    /// As `Policy`, but traps on a 503 (validation's smoke call is a 500): a version
    /// that passes validation and fails in use.
    TrapOn503,
    /// Always answers refresh: valid, and different from `Policy`.
    Refresh,
}

/// How many lines [`Classify::Chatty`] logs per call.
pub const CHATTY_LINES: usize = 1_000;

/// How a fixture's `select` behaves.
#[derive(Debug, Clone, Copy)]
pub enum Select {
    /// The last candidate, with a 7000 ms delay.
    Last,
    /// A Stage that is not a candidate.
    Stranger,
}

const PRELUDE: &str = r#"
  (memory (export "memory") 2)
  (global $heap (mut i32) (i32.const 8192))
  (func (export "cabi_realloc") (param $old i32) (param $old_size i32) (param $align i32) (param $size i32) (result i32)
    (local $p i32)
    (local.set $p (i32.and
      (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
      (i32.sub (i32.const 0) (local.get $align))))
    (global.set $heap (i32.add (local.get $p) (local.get $size)))
    (if (i32.gt_u (global.get $heap) (i32.mul (memory.size) (i32.const 65536)))
      (then (drop (memory.grow
        (i32.add (i32.const 1) (i32.div_u
          (i32.sub (global.get $heap) (i32.mul (memory.size) (i32.const 65536)))
          (i32.const 65536)))))))
    (local.get $p))
  (func $reset (param i32) (global.set $heap (i32.const 8192)))
  (data (i32.const 16) "fixture")
  (data (i32.const 96) "nope")
  (func (export "kstage:plugin/metadata@0.1.0#info") (result i32) (i32.const 256))
  (export "cabi_post_kstage:plugin/metadata@0.1.0#info" (func $reset))
"#;

fn le(values: &[u32]) -> String {
    values
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .map(|b| format!("\\{b:02x}"))
        .collect()
}

/// [`Classify::Policy`]'s body.
const POLICY: &str = r#"
    (if (i32.and (local.get 1) (i32.eq (local.get 2) (i32.const 429)))
      (then
        (i32.store8 (i32.const 512) (i32.const 0))
        (i64.store (i32.const 520) (i64.const 1234))
        (return (i32.const 512))))
    (if (i32.ge_u (local.get 13) (i32.const 2))
      (then
        (i32.store8 (i32.const 512) (i32.const 3))
        (i32.store8 (i32.const 520) (i32.const 1))
        (return (i32.const 512))))
    (i32.store8 (i32.const 512) (i32.const 1))
    (i32.const 512)"#;

fn classify(behaviour: Classify) -> String {
    let chatty = chatty();
    let trap_on_503 = format!(
        "(if (i32.and (local.get 1) (i32.eq (local.get 2) (i32.const 503))) (then unreachable))\n{POLICY}"
    );
    let body = match behaviour {
        Classify::Policy => POLICY,
        Classify::TrapOn503 => &trap_on_503,
        Classify::Refresh => "(i32.store8 (i32.const 512) (i32.const 2)) (i32.const 512)",
        Classify::Loop => "(loop $l (br $l)) (i32.const 512)",
        Classify::Hog => "(loop $l (drop (memory.grow (i32.const 16))) (br $l)) (i32.const 512)",
        Classify::Trap => "unreachable",
        Classify::Chatty => &chatty,
    };
    format!(
        r#"
  (func (export "kstage:plugin/classifier@0.1.0#classify")
    (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i64 i32 i32 i32 i32 i32 i32) (result i32)
    {body})
  (export "cabi_post_kstage:plugin/classifier@0.1.0#classify" (func $reset))
"#
    )
}

/// [`Classify::Chatty`]'s body: a loop around the `log` import (level 0, 32 KiB of the
/// second memory page, which holds zeros: valid UTF-8).
fn chatty() -> String {
    format!(
        r#"(local i32)
    (loop $l
      (call $log (i32.const 0) (i32.const 65536) (i32.const 32768))
      (local.set 16 (i32.add (local.get 16) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get 16) (i32.const {CHATTY_LINES}))))
    (i32.store8 (i32.const 512) (i32.const 1))
    (i32.const 512)"#
    )
}

fn select(behaviour: Select) -> String {
    let name = match behaviour {
        // The last candidate's name: candidates are 32 bytes each, name (ptr, len) first.
        Select::Last => {
            r#"
    (local.set 4 (i32.add (local.get 2) (i32.mul (i32.sub (local.get 3) (i32.const 1)) (i32.const 32))))
    (i32.store (i32.const 528) (i32.load (local.get 4)))
    (i32.store (i32.const 532) (i32.load offset=4 (local.get 4)))
    (i32.store8 (i32.const 536) (i32.const 1))
    (i64.store (i32.const 544) (i64.const 7000))"#
        }
        Select::Stranger => {
            r#"
    (i32.store (i32.const 528) (i32.const 96))
    (i32.store (i32.const 532) (i32.const 4))
    (i32.store8 (i32.const 536) (i32.const 0))"#
        }
    };
    format!(
        r#"
  (func (export "kstage:plugin/selector@0.1.0#select") (param i32 i32 i32 i32) (result i32)
    (local i32)
    (i32.store8 (i32.const 512) (i32.const 0))
    (i32.store8 (i32.const 520) (i32.const 1))
    {name}
    (i32.const 512))
  (export "cabi_post_kstage:plugin/selector@0.1.0#select" (func $reset))
"#
    )
}

/// How a fixture's `render` behaves.
#[derive(Debug, Clone, Copy)]
pub enum Render {
    /// Answers the template itself (so a JSON template is its own rendering).
    Echo,
    /// Always traps (fails validation's smoke call).
    Trap,
    /// Echoes templates of up to 2 bytes (the smoke call's `{}`), traps on longer ones:
    /// a plugin that passes validation and fails in use.
    TrapOnLong,
    /// Answers `nope`, which is not JSON.
    Garbage,
}

fn render(behaviour: Render) -> String {
    let guard = match behaviour {
        Render::Echo => "",
        Render::Trap => "unreachable",
        Render::TrapOnLong => "(if (i32.gt_u (local.get 3) (i32.const 2)) (then unreachable))",
        Render::Garbage => {
            "(i32.store8 (i32.const 512) (i32.const 0))
    (i32.store (i32.const 516) (i32.const 96))
    (i32.store (i32.const 520) (i32.const 4))
    (return (i32.const 512))"
        }
    };
    format!(
        r#"
  (func (export "kstage:plugin/renderer@0.1.0#render") (param i32 i32 i32 i32 i32 i32) (result i32)
    {guard}
    (i32.store8 (i32.const 512) (i32.const 0))
    (i32.store (i32.const 516) (local.get 2))
    (i32.store (i32.const 520) (local.get 3))
    (i32.const 512))
  (export "cabi_post_kstage:plugin/renderer@0.1.0#render" (func $reset))
"#
    )
}

/// A fixture component: which exports, and what `metadata.info` says its interface
/// version is.
#[derive(Debug, Clone)]
pub struct Fixture {
    /// `classify`, if exported.
    pub classify: Option<Classify>,
    /// `select`, if exported.
    pub select: Option<Select>,
    /// `render`, if exported.
    pub render: Option<Render>,
    /// What `metadata.info` reports as the plugin's version (5 characters).
    pub version: &'static str,
    /// What `metadata.info` reports as its interface version.
    pub interface_version: &'static str,
}

impl Default for Fixture {
    fn default() -> Self {
        Self {
            classify: None,
            select: None,
            render: None,
            version: "1.0.0",
            interface_version: "0.1.0",
        }
    }
}

impl Fixture {
    /// A classifier plugin.
    pub fn classifier(behaviour: Classify) -> Self {
        Self {
            classify: Some(behaviour),
            ..Self::default()
        }
    }

    /// The component's bytes.
    pub fn build(&self) -> Vec<u8> {
        let version = self.interface_version;
        assert_eq!(
            self.version.len(),
            5,
            "the fixture's version has 5 characters"
        );
        let info = le(&[16, 7, 32, 5, 48, version.len() as u32]);
        // Imports come before every definition.
        let imports = if matches!(self.classify, Some(Classify::Chatty)) {
            r#"(import "kstage:plugin/host@0.1.0" "log" (func $log (param i32 i32 i32)))"#
        } else {
            ""
        };
        let mut wat = format!(
            "(module {imports}\n{PRELUDE}\n  (data (i32.const 32) \"{}\")\n  (data (i32.const 48) \"{version}\")\n  (data (i32.const 256) \"{info}\")\n",
            self.version
        );
        let mut exports = vec!["export metadata;"];
        if let Some(behaviour) = self.classify {
            wat.push_str(&classify(behaviour));
            exports.push("export classifier;");
        }
        if let Some(behaviour) = self.select {
            wat.push_str(&select(behaviour));
            exports.push("export selector;");
        }
        if let Some(behaviour) = self.render {
            wat.push_str(&render(behaviour));
            exports.push("export renderer;");
        }
        wat.push(')');
        let mut module = wat::parse_str(&wat).expect("fixture WAT parses");
        let mut resolve = Resolve::default();
        let (package, _) = resolve
            .push_path(Path::new(env!("CARGO_MANIFEST_DIR")).join("wit"))
            .expect("the WIT parses");
        // A world of exactly the fixture's exports.
        let world_src = format!(
            "package kstage:fixture;\nworld fixture {{\n  import kstage:plugin/host@0.1.0;\n{}\n}}\n",
            exports
                .iter()
                .map(|e| format!(
                    "  {}",
                    e.replace("export ", "export kstage:plugin/")
                        .replace(';', "@0.1.0;")
                ))
                .collect::<Vec<_>>()
                .join("\n")
        );
        let fixture = resolve
            .push_str("fixture.wit", &world_src)
            .expect("the fixture world parses");
        let _ = package;
        let world = resolve
            .select_world(&[fixture], Some("fixture"))
            .expect("the fixture world exists");
        wit_component::embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8)
            .expect("metadata embeds");
        ComponentEncoder::default()
            .module(&module)
            .expect("module accepted")
            .validate(true)
            .encode()
            .expect("component encodes")
    }
}
