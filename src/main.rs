//! The `kstage` binary: see `kstage --help`.

fn main() -> std::process::ExitCode {
    kstage::cli::main()
}

/// kstage allocates many small JSON nodes per transition; mimalloc handles that pattern
/// markedly faster than the system allocator (see the README's performance section).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
