//! A `.pocket` file (header checksum fixed up so the JSON header and tensor table get explored):
//! open, verify every checksum, load, two tokens.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pocket_formats::pocket::reader::PocketFile;
use pocket_fuzz::inputs;

fuzz_target!(|data: &[u8]| {
    let bytes = inputs::fix_pocket_checksum(data);
    let path =
        inputs::write_file(&bytes, &inputs::scratch(), "model.pocket").expect("scratch write");
    if let Ok(f) = PocketFile::open(&path) {
        let _ = f.verify();
        for b in &f.header.blobs {
            let _ = f.blob(&b.name);
        }
    }
    pocket_fuzz::exercise(&path);
});
