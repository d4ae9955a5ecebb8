#![no_main]
//! `kstage::fuzzing::selector`; jq and CEL programs that can run without bound go to the
//! evaluation sandbox of the kstage binary named by `KSTAGE_BIN`, as in the daemon.

libfuzzer_sys::fuzz_target!(
    init: {
        if let Some(exe) = std::env::var_os("KSTAGE_BIN") {
            kstage::fuzzing::install_sandbox(exe.into());
        }
    },
    |data: &[u8]| kstage::fuzzing::selector(data)
);
