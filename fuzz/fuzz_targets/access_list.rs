//! Any text: parsing an access list never panics, and a list that parses holds
//! exactly the hashes it lists, written back and read again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_common::AccessList;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(list) = AccessList::parse(text) {
        let hashes: Vec<[u8; 20]> = list.iter().copied().collect();
        assert_eq!(hashes.len(), list.len());
        let lines: String = hashes
            .iter()
            .map(|hash| {
                let mut line: String = hash.iter().map(|b| format!("{b:02x}")).collect();
                line.push('\n');
                line
            })
            .collect();
        let again = AccessList::parse(&lines).expect("our own output parses");
        assert_eq!(again, list);
    }
});
