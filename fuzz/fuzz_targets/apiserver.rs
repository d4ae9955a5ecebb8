#![no_main]
//! `kstage::fuzzing::apiserver`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| kstage::fuzzing::apiserver(data));
