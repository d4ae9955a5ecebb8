#![no_main]
//! `kstage::fuzzing::patch`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| kstage::fuzzing::patch(data));
