//! The `kstage` binary: see `kstage --help`.

fn main() -> std::process::ExitCode {
    kstage::cli::main()
}
