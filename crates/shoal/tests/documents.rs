//! The documents' examples, run: every `curl` command in documents/admin-api.md's
//! shell blocks is sent, in order, to a running `shoal` (its address put in for
//! `127.0.0.1:9970`, `$TOKEN` set), and its answer checked against the `# <status>
//! <json>` comment under it, so an example cannot drift from what the API does. A
//! block whose first line is `# not run: <reason>` says why it is not.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use shoal_common::testing::Process;

const BINARY: &str = env!("CARGO_BIN_EXE_shoal");
const TOKEN: &str = "f1e2d3c4b5a69788f1e2d3c4b5a69788";

/// A command found in a document, and the answer written under it.
#[derive(Debug)]
struct Example {
    /// The document's line the command starts on.
    line: usize,
    command: String,
    /// The status and the JSON (what the answer must hold at least) written under it.
    expected: Option<(u16, Value)>,
}

/// The `curl` commands of `markdown`'s `sh` blocks, with the answers written under
/// them; and the blocks not run, with their reasons.
fn examples(markdown: &str) -> (Vec<Example>, Vec<String>) {
    let mut examples = Vec::new();
    let mut not_run = Vec::new();
    for (first, lines) in shoal_common::testing::markdown_blocks(markdown, "sh") {
        let (start, end) = (0, lines.len());
        if let Some(reason) = lines
            .first()
            .and_then(|line| line.trim().strip_prefix("# not run:"))
        {
            not_run.push(format!("line {first}: {}", reason.trim()));
            continue;
        }
        let mut at = start;
        while at < end {
            if !lines[at].trim_start().starts_with("curl ") {
                at += 1;
                continue;
            }
            let line = first + at;
            let mut command = String::new();
            loop {
                let text = lines[at].trim_end();
                at += 1;
                match text.strip_suffix('\\') {
                    Some(head) if at < end => command.push_str(head),
                    _ => {
                        command.push_str(text);
                        break;
                    }
                }
            }
            // `# 200 {...}`, continued by `#   ...` lines.
            let mut expected = None;
            if let Some(rest) = lines.get(at).and_then(|l| l.trim().strip_prefix("# "))
                && let Some(status) = rest.get(..3).and_then(|s| s.parse::<u16>().ok())
            {
                let mut json = rest[3..].to_owned();
                at += 1;
                while at < end {
                    let next = lines[at].trim();
                    match next.strip_prefix('#') {
                        Some(more) if more.starts_with("  ") => {
                            json.push_str(more.trim());
                            at += 1;
                        }
                        _ => break,
                    }
                }
                // The JSON, and whatever prose follows it on the line.
                let value = serde_json::Deserializer::from_str(json.trim())
                    .into_iter::<Value>()
                    .next()
                    .unwrap_or_else(|| panic!("line {line}: no JSON after the status"))
                    .unwrap_or_else(|err| panic!("line {line}: the answer is not JSON: {err}"));
                expected = Some((status, value));
            }
            examples.push(Example {
                line,
                command,
                expected,
            });
        }
    }
    (examples, not_run)
}

/// Whether `actual` holds everything `expected` says: every key of an object, the
/// first elements of an array in order, equal scalars.
fn holds(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::Object(actual), Value::Object(expected)) => expected
            .iter()
            .all(|(key, value)| actual.get(key).is_some_and(|got| holds(got, value))),
        (Value::Array(actual), Value::Array(expected)) => {
            expected.len() <= actual.len()
                && actual
                    .iter()
                    .zip(expected)
                    .all(|(got, value)| holds(got, value))
        }
        _ => actual == expected,
    }
}

fn document(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../documents")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// A `shoal` as the admin API's examples expect it: a public UDP tracker with an
/// allow list, private HTTP and WebTorrent trackers, the admin API.
fn start(dir: &Path) -> (Process, std::net::SocketAddr) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("users"), "17 6f0d1b2c3d4e5f60718293a4b5c6d7e8\n").unwrap();
    std::fs::write(dir.join("torrents"), format!("{} 1\n", "ff".repeat(20))).unwrap();
    std::fs::write(dir.join("allowed"), format!("{}\n", "ee".repeat(20))).unwrap();
    std::fs::write(dir.join("token"), format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(dir.join("token"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let private = format!(
        "enabled = true\nusers_path = \"{}\"\ntorrents_path = \"{}\"\n",
        dir.join("users").display(),
        dir.join("torrents").display()
    );
    let config = format!(
        "[admin]\nenabled = true\naddress = \"127.0.0.1:0\"\ntoken_path = \"{}\"\n\
         [udp.network]\naddress_ipv4 = \"127.0.0.1:0\"\nuse_ipv6 = false\n\
         [udp.access_list]\nmode = \"allow\"\npath = \"{}\"\n\
         [http.network]\naddress_ipv4 = \"127.0.0.1:0\"\nuse_ipv6 = false\n\
         [http.private]\n{private}\
         [ws.network]\naddress_ipv4 = \"127.0.0.1:0\"\nuse_ipv6 = false\n\
         [ws.private]\n{private}",
        dir.join("token").display(),
        dir.join("allowed").display(),
    );
    std::fs::write(dir.join("shoal.toml"), config).unwrap();
    let mut command = Command::new(BINARY);
    command.arg("-c").arg(dir.join("shoal.toml"));
    let mut process = Process::start(command);
    let api = process.address_after("admin API on http://");
    (process, api)
}

/// Runs `examples` against the API at `api`; returns the failures.
fn run(examples: &[Example], api: std::net::SocketAddr, dir: &Path) -> Vec<String> {
    // curl writes the status after the body: `-w` from a config file, so that the
    // commands run as written.
    let home: PathBuf = dir.join("curl");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join(".curlrc"), "-w \"\\n%{http_code}\"\n").unwrap();
    let mut failures = Vec::new();
    for example in examples {
        let command = example
            .command
            .replace("http://127.0.0.1:9970", &format!("http://{api}"));
        let output = Command::new("sh")
            .arg("-c")
            .arg(&command)
            .env("TOKEN", TOKEN)
            .env("CURL_HOME", &home)
            .output()
            .expect("sh and curl (scripts/test.sh installs curl)");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let (body, status) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
        let status: u16 = status.trim().parse().unwrap_or(0);
        let Some((want_status, want)) = &example.expected else {
            if !(200..300).contains(&status) {
                failures.push(format!("line {}: {status} {body}", example.line));
            }
            continue;
        };
        let got: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        if status != *want_status || !holds(&got, want) {
            failures.push(format!(
                "line {}: `{}`\n  wanted {want_status} {want}\n  got    {status} {body}",
                example.line, example.command
            ));
        }
    }
    failures
}

#[test]
fn the_admin_api_examples_answer_as_documented() {
    let (examples, not_run) = examples(&document("admin-api.md"));
    assert!(examples.len() >= 15, "{examples:#?}");
    let dir = std::env::temp_dir().join(format!("shoal-documents-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (process, api) = start(&dir);
    let failures = run(&examples, api, &dir);
    process.stop();
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("{} examples run; not run: {not_run:#?}", examples.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The bodies of `markdown`'s fenced blocks of `language`, in order.
fn blocks(markdown: &str, language: &str) -> Vec<String> {
    shoal_common::testing::markdown_blocks(markdown, language)
        .into_iter()
        .map(|(_, lines)| lines.iter().map(|line| format!("{line}\n")).collect())
        .collect()
}

/// documents/private.md's stateless keys, followed as a site would: a secret made by
/// `openssl rand -hex 32 >` (a newline at its end), keys made by the documented
/// Python, the fingerprint by the documented one-liner, against the tracker's.
#[test]
fn the_stateless_key_recipe_gives_keys_the_tracker_takes() {
    use std::os::unix::fs::PermissionsExt as _;
    let markdown = document("private.md");
    let dir = std::env::temp_dir().join(format!("shoal-documents-secret-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("key.secret");
    let made = Command::new("sh")
        .arg("-c")
        .arg(format!("openssl rand -hex 32 > '{}'", secret.display()))
        .status()
        .expect("sh and openssl");
    assert!(made.success());
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(dir.join("users"), "").unwrap();
    std::fs::write(dir.join("torrents"), format!("{} 1\n", "aa".repeat(20))).unwrap();
    std::fs::write(
        dir.join("shoal.toml"),
        format!(
            "[network]\naddress_ipv4 = \"127.0.0.1:0\"\nuse_ipv6 = false\n\
             [private]\nenabled = true\nusers_path = \"{}\"\ntorrents_path = \"{}\"\n\
             key_secret_path = \"{}\"\n",
            dir.join("users").display(),
            dir.join("torrents").display(),
            secret.display()
        ),
    )
    .unwrap();
    let mut command = Command::new(BINARY);
    command.arg("http").arg("-c").arg(dir.join("shoal.toml"));
    let mut process = Process::start(command);
    let logged = process.line_with("secret fingerprint ");
    let tracker = process.address_after("listening on http://");
    // The site's side, as documented: the recipe's blocks, the file's path put in.
    let python: String = blocks(&markdown, "python")
        .concat()
        .replace("/etc/shoal/key.secret", &secret.display().to_string());
    let key = Command::new("python3")
        .arg("-c")
        .arg(&python)
        .output()
        .expect("python3");
    assert!(
        key.status.success(),
        "{}",
        String::from_utf8_lossy(&key.stderr)
    );
    let key = String::from_utf8(key.stdout).unwrap().trim().to_owned();
    assert!(key.starts_with("42-1-"), "{key}");
    let fingerprint_line = blocks(&markdown, "sh")
        .into_iter()
        .find(|block| block.contains("hashlib.sha256"))
        .expect("the fingerprint's one-liner")
        .replace("/etc/shoal/key.secret", &secret.display().to_string());
    let fingerprint = Command::new("sh")
        .arg("-c")
        .arg(fingerprint_line.trim())
        .output()
        .unwrap();
    let fingerprint = String::from_utf8(fingerprint.stdout).unwrap();
    assert_eq!(fingerprint.trim().len(), 8, "{fingerprint}");
    assert!(
        logged.contains(&format!("secret fingerprint {}", fingerprint.trim())),
        "{logged} / {fingerprint}"
    );
    // The tracker takes the key the recipe made.
    let mut stream = std::net::TcpStream::connect(tracker).unwrap();
    use std::io::{Read as _, Write as _};
    write!(
        stream,
        "GET /{key}/announce?info_hash={}&peer_id=-qB4650-aaaaaaaaaaaa&port=6881&left=0 \
         HTTP/1.1\r\nConnection: close\r\n\r\n",
        "%AA".repeat(20)
    )
    .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    assert!(reply.contains("8:intervali"), "{reply}");
    process.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every shell example of README.md and documents/ is run, or says in its first line
/// why not (`# not run: <reason>`, visible to the reader). The curl examples and the
/// stateless-key one-liner are run by the tests above; every other block is run here
/// by bash (`-euo pipefail`) in a directory of its own, with the binaries on PATH
/// (`shoal_udp`, `shoal_http`, `shoal_ws` as the combined binary's subcommands, which
/// are the same trackers) and `$EDITOR` a no-op.
#[test]
fn every_shell_example_is_run_or_says_why_not() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("documents")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|ext| ext == "md") {
            files.push(path);
        }
    }
    let dir = std::env::temp_dir().join(format!("shoal-documents-sh-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(BINARY, bin.join("shoal")).unwrap();
    for kind in ["udp", "http", "ws"] {
        let wrapper = bin.join(format!("shoal_{kind}"));
        std::fs::write(&wrapper, format!("#!/bin/sh\nexec shoal {kind} \"$@\"\n")).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (mut ran, mut not_run, mut failures) = (0, Vec::new(), Vec::new());
    for file in files {
        let name = file.strip_prefix(&root).unwrap().display().to_string();
        for block in blocks(&std::fs::read_to_string(&file).unwrap(), "sh") {
            let first = block.lines().next().unwrap_or("");
            if let Some(reason) = first.trim().strip_prefix("# not run:") {
                assert!(
                    !reason.trim().is_empty(),
                    "{name}: a not-run tag without a reason"
                );
                not_run.push(format!("{name}: {}", reason.trim()));
                continue;
            }
            if block.contains("curl ") || block.contains("hashlib.sha256") {
                continue; // run by the tests above
            }
            // Only what is safe to run on any machine: the binaries printing or
            // checking a config, and the editor. Anything else (apt, systemctl, a
            // tracker serving on the public ports) must say why it is not run, and is
            // never started by accident.
            let safe = |line: &str| {
                let words: Vec<&str> = line.split_whitespace().collect();
                match words.first() {
                    Some(&"$EDITOR") => true,
                    Some(&("shoal" | "shoal_udp" | "shoal_http" | "shoal_ws")) => {
                        words.iter().any(|word| {
                            ["-p", "-P", "--help", "--version", "check-host"].contains(word)
                        })
                    }
                    _ => false,
                }
            };
            let unsafe_line = block
                .lines()
                .map(str::trim)
                .find(|line| !line.is_empty() && !line.starts_with('#') && !safe(line));
            if let Some(line) = unsafe_line {
                failures.push(format!(
                    "{name}: `{line}` is not run by this test: make the block run here, or \
                     begin it with `# not run: <reason>`"
                ));
                continue;
            }
            let work = dir.join(format!("block-{ran}"));
            std::fs::create_dir_all(&work).unwrap();
            let output = Command::new("timeout")
                .args(["60", "bash", "-euo", "pipefail", "-c", &block])
                .current_dir(&work)
                .env("PATH", &path)
                .env("EDITOR", "true")
                .env_remove("SHOAL_LOG")
                .output()
                .expect("bash and timeout");
            if !output.status.success() {
                failures.push(format!(
                    "{name}: the block\n{block}exited {:?}: {}",
                    output.status.code(),
                    String::from_utf8_lossy(&output.stderr)
                ));
            }
            ran += 1;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("{ran} shell examples run; not run: {not_run:#?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(ran >= 1, "no shell example run");
}
