#![no_main]
//! `kstage::fuzzing::yaml`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| kstage::fuzzing::yaml(data));
