#![no_main]
//! `kstage::fuzzing::template`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| kstage::fuzzing::template(data));
