//! The `kstage` binary: see `kstage --help`.

fn main() -> std::process::ExitCode {
    kstage::cli::main()
}

/// kstage allocates and frees many small JSON nodes per transition; jemalloc handles that
/// pattern faster than the system allocator (see the README's performance section).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
