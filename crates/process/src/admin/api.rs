//! The admin API's requests and answers, with no I/O: a request's head and body in,
//! the whole answer out.
//!
//! Routes (documents/admin-api.md has the bodies and answers):
//!
//! * `GET /v1/status`: each tracker's mode, users, torrents and access list;
//! * `GET | PUT | DELETE /v1/users/<user id>`;
//! * `GET | PUT | DELETE /v1/torrents/<info hash>`;
//! * `GET | PUT | DELETE /v1/access-list/<info hash>`, and `POST /v1/access-list` with
//!   `{"add": [...], "remove": [...]}` for many at once;
//! * `GET | PUT /v1/client-rules`: the peer-id and User-Agent prefixes served or
//!   refused (`[clients]`), replaced whole;
//! * `GET /v1/interval`, `PUT /v1/interval/<tracker>`: the announce interval each
//!   tracker gives now, its load, and the bounds of its adaptive interval, which a
//!   `PUT` changes (or fixes an interval) until the next restart.
//!
//! `PUT` and `DELETE` are idempotent: a repeated request changes nothing and says so
//! (`"change": "unchanged"`, `"deleted": false`). Users and torrents are changed in
//! every private tracker's registry (trackers that name the same files share one);
//! access-list entries in every tracker whose access list is on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};
use shoal_common::{AccessListMode, ClientConfig, LogBudget, RuleSet, parse_hex_hash};
use shoal_private::{Change, Conflict, KeyChange, KeyDigest, Passkey, Registry, Torrent, User};

use super::AdminTarget;

/// Headers read from a request at most.
const MAX_HEADERS: usize = 32;
/// Info hashes one bulk access-list edit may name.
pub(crate) const MAX_BULK: usize = 100_000;

/// The API over the trackers of one process.
#[derive(Debug)]
pub struct AdminApi {
    token: KeyDigest,
    targets: Vec<AdminTarget>,
    /// Each registry once, however many trackers share it.
    registries: Vec<Arc<Registry>>,
    refused: LogBudget,
}

/// An answer: status and JSON body.
struct Answer {
    status: u16,
    body: Value,
}

impl Answer {
    fn ok(body: Value) -> Self {
        Self { status: 200, body }
    }

    fn error(status: u16, message: impl Into<String>) -> Self {
        Self {
            status,
            body: json!({ "error": message.into() }),
        }
    }
}

/// What a `PUT` on a user changes: the fields it names, and only those (the user's
/// others keep their values; a new user's take the defaults).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserBody {
    /// Absent: the passkey stays as it is (none for a new user, who then announces
    /// with stateless keys); `null`: taken away; a string: set (the old one stops
    /// working).
    #[serde(default, deserialize_with = "present")]
    passkey: Option<Option<String>>,
    min_key_version: Option<u16>,
    can_leech: Option<bool>,
    disabled: Option<bool>,
    peer_cap: Option<u16>,
}

/// What a `PUT` on a torrent changes: the fields it names; a new torrent needs its
/// `id`, and its factors default to 100.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TorrentBody {
    id: Option<u32>,
    up_factor: Option<u16>,
    down_factor: Option<u16>,
}

/// A field that may be `null`: present as `Some(None)`, absent (through
/// `#[serde(default)]`) as `None`.
fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// A bulk access-list edit.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BulkBody {
    #[serde(default)]
    add: Vec<String>,
    #[serde(default)]
    remove: Vec<String>,
}

/// The bytes of an answer: status line, headers (a challenge with 401), JSON body.
fn render(answer: &Answer) -> Vec<u8> {
    let text = answer.body.to_string();
    let reason = match answer.status {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        _ => "Error",
    };
    let challenge = if answer.status == 401 {
        "WWW-Authenticate: Bearer realm=\"shoal admin\"\r\n"
    } else {
        ""
    };
    format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{challenge}Cache-Control: no-store\r\nConnection: close\r\n\r\n{text}\n",
        answer.status,
        text.len() + 1
    )
    .into_bytes()
}

impl AdminApi {
    /// The API over `targets`, for requests carrying the token whose digest is `token`.
    pub fn new(token: KeyDigest, targets: Vec<AdminTarget>) -> Self {
        let mut registries: Vec<Arc<Registry>> = Vec::new();
        for registry in targets.iter().filter_map(|t| t.registry.as_ref()) {
            if !registries.iter().any(|known| Arc::ptr_eq(known, registry)) {
                registries.push(registry.clone());
            }
        }
        Self {
            token,
            targets,
            registries,
            refused: LogBudget::new(5, Duration::from_secs(60)),
        }
    }

    /// The refusal of a request by its head alone (not an HTTP request, or without
    /// the right token), before its body is read: a stranger's `Content-Length`
    /// costs nothing.
    pub fn check_head(
        &mut self,
        head: &[u8],
        from: Option<std::net::SocketAddr>,
    ) -> Option<Vec<u8>> {
        self.refuse_head(head, from).map(|answer| render(&answer))
    }

    /// The whole answer (status line to body) to a request.
    pub fn respond(&mut self, head: &[u8], body: &[u8]) -> Vec<u8> {
        render(&self.answer(head, body))
    }

    /// `from`: the client, for the log.
    fn refuse_head(&mut self, head: &[u8], from: Option<std::net::SocketAddr>) -> Option<Answer> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut headers);
        if !matches!(request.parse(head), Ok(httparse::Status::Complete(_))) {
            return Some(Answer::error(400, "not an HTTP/1.1 request head"));
        }
        let authorized = request
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("authorization"))
            .and_then(|h| h.value.strip_prefix(b"Bearer "))
            .is_some_and(|token| KeyDigest::of_secret(token.trim_ascii()) == self.token);
        if authorized {
            return None;
        }
        if let Some(left_out) = self.refused.take(Instant::now()) {
            let from = from.map_or(String::new(), |from| format!(" from {}", from.ip()));
            log::warn!(
                "admin API: a request{from} without the right token refused{}",
                shoal_common::left_out(left_out)
            );
        }
        Some(Answer::error(
            401,
            "send the token from admin.token_path: Authorization: Bearer <token>",
        ))
    }

    fn answer(&mut self, head: &[u8], body: &[u8]) -> Answer {
        if let Some(refused) = self.refuse_head(head, None) {
            return refused;
        }
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut headers);
        if !matches!(request.parse(head), Ok(httparse::Status::Complete(_))) {
            return Answer::error(400, "not an HTTP/1.1 request head");
        }
        let method = request.method.unwrap_or_default();
        let path = request.path.unwrap_or_default();
        let path = path.split('?').next().unwrap_or_default();
        let segments: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
        match (method, segments.as_slice()) {
            ("GET", ["v1", "status"]) => Answer::ok(self.status()),
            (_, ["v1", "users", id]) => match shoal_private::canonical_number(id) {
                Some(id) => self.user(method, id, body),
                None => Answer::error(
                    400,
                    "a user id is a number up to 4294967295, without sign or leading zeros",
                ),
            },
            (_, ["v1", "torrents", hash]) => match parse_hex_hash(hash) {
                Ok(hash) => self.torrent(method, &hash, body),
                Err(problem) => Answer::error(400, format!("info hash: {problem}")),
            },
            ("POST", ["v1", "access-list"]) => self.bulk_access(body),
            (_, ["v1", "client-rules"]) => self.client_rules(method, body),
            ("GET", ["v1", "interval"]) => Answer::ok(self.intervals()),
            (_, ["v1", "interval", tracker]) => self.interval(method, tracker, body),
            (_, ["v1", "access-list", hash]) => match parse_hex_hash(hash) {
                Ok(hash) => self.access(method, &hash),
                Err(problem) => Answer::error(400, format!("info hash: {problem}")),
            },
            (_, ["v1", "status" | "access-list"]) => {
                Answer::error(405, format!("{method} is not served here"))
            }
            _ => Answer::error(404, "no such resource (documents/admin-api.md)"),
        }
    }

    fn status(&self) -> Value {
        let trackers: Vec<Value> = self
            .targets
            .iter()
            .map(|target| {
                let registry = target.registry.as_ref().map(|registry| {
                    let (users, torrents) = registry.counts();
                    json!({ "users": users, "torrents": torrents })
                });
                json!({
                    "tracker": target.protocol,
                    "private": registry,
                    "accounting": target.accounts.is_some(),
                    "access_list": {
                        "mode": mode_name(target.access.mode()),
                        "entries": target.access.len(),
                    },
                })
            })
            .collect();
        json!({ "trackers": trackers })
    }

    /// The registries, or the answer when no tracker is private.
    fn registries(&self) -> Result<&[Arc<Registry>], Answer> {
        if self.registries.is_empty() {
            return Err(Answer::error(
                409,
                "private mode is off on every tracker ([private] enabled = false)",
            ));
        }
        Ok(&self.registries)
    }

    fn user(&self, method: &str, id: u32, body: &[u8]) -> Answer {
        let registries = match self.registries() {
            Ok(registries) => registries,
            Err(answer) => return answer,
        };
        match method {
            "GET" => {
                let Some(user) = registries.iter().find_map(|r| r.user_by_id(id)) else {
                    return Answer::error(404, format!("no user {id}"));
                };
                let live: Vec<Value> = self
                    .targets
                    .iter()
                    .filter_map(|t| Some((t.protocol, t.accounts.as_ref()?.live_user(id)?)))
                    .map(|(tracker, live)| json!({ "tracker": tracker, "live": live_json(&live) }))
                    .collect();
                Answer::ok(json!({
                    "user": id,
                    "has_passkey": registries.iter().any(|r| r.has_passkey(id)),
                    "can_leech": user.can_leech,
                    "disabled": user.disabled,
                    "peer_cap": user.peer_cap,
                    "min_key_version": user.min_key_version,
                    "accounting": live,
                }))
            }
            "PUT" => {
                let body: UserBody = match parse_body(body) {
                    Ok(body) => body,
                    Err(answer) => return answer,
                };
                let key = match &body.passkey {
                    None => KeyChange::Keep,
                    Some(None) => KeyChange::Remove,
                    Some(Some(text)) => match Passkey::new(text.as_bytes()) {
                        Some(key) => KeyChange::Set(key),
                        None => {
                            return Answer::error(
                                400,
                                format!(
                                    "passkey: {} to {} characters of A-Z, a-z, 0-9, - and _ \
                                     (or null to take it away)",
                                    shoal_private::MIN_KEY_LEN,
                                    shoal_private::MAX_KEY_LEN
                                ),
                            );
                        }
                    },
                };
                // What the user is now, changed where the body says.
                let now = registries
                    .iter()
                    .find_map(|r| r.user_by_id(id))
                    .unwrap_or(User::unrestricted(id));
                let user = User {
                    id,
                    can_leech: body.can_leech.unwrap_or(now.can_leech),
                    disabled: body.disabled.unwrap_or(now.disabled),
                    peer_cap: body.peer_cap.unwrap_or(now.peer_cap),
                    min_key_version: body.min_key_version.unwrap_or(now.min_key_version),
                };
                let mut change = Change::Unchanged;
                for registry in registries {
                    match registry.put_user(user, key) {
                        Ok(Change::Unchanged) => {}
                        Ok(done) => change = strongest(change, done),
                        Err(Conflict::KeyTaken(owner)) => {
                            return Answer::error(409, format!("that passkey is user {owner}'s"));
                        }
                    }
                }
                log_change("user", &id.to_string(), change);
                changed(change, json!({ "user": id, "change": change_name(change) }))
            }
            "DELETE" => {
                let deleted = registries
                    .iter()
                    .fold(false, |any, r| r.delete_user(id) | any);
                if deleted {
                    log::info!("admin API: user {id} deleted");
                }
                Answer::ok(json!({ "user": id, "deleted": deleted }))
            }
            _ => Answer::error(405, "users take GET, PUT and DELETE"),
        }
    }

    fn torrent(&self, method: &str, hash: &[u8; 20], body: &[u8]) -> Answer {
        let registries = match self.registries() {
            Ok(registries) => registries,
            Err(answer) => return answer,
        };
        let hex = hex(hash);
        match method {
            "GET" => {
                let Some(torrent) = registries.iter().find_map(|r| r.torrent(hash)) else {
                    return Answer::error(404, format!("{hex} is not registered"));
                };
                let live: Vec<Value> = self
                    .targets
                    .iter()
                    .filter_map(|t| {
                        Some((t.protocol, t.accounts.as_ref()?.live_torrent(torrent.id)?))
                    })
                    .map(|(tracker, live)| json!({ "tracker": tracker, "live": live_json(&live) }))
                    .collect();
                Answer::ok(json!({
                    "info_hash": hex,
                    "id": torrent.id,
                    "up_factor": torrent.up_factor,
                    "down_factor": torrent.down_factor,
                    "accounting": live,
                }))
            }
            "PUT" => {
                let body: TorrentBody = match parse_body(body) {
                    Ok(body) => body,
                    Err(answer) => return answer,
                };
                let now = registries.iter().find_map(|r| r.torrent(hash));
                let Some(id) = body.id.or(now.map(|torrent| torrent.id)) else {
                    return Answer::error(400, "id: a new torrent needs the site's id for it");
                };
                let torrent = Torrent {
                    id,
                    up_factor: body
                        .up_factor
                        .or(now.map(|torrent| torrent.up_factor))
                        .unwrap_or(100),
                    down_factor: body
                        .down_factor
                        .or(now.map(|torrent| torrent.down_factor))
                        .unwrap_or(100),
                };
                if torrent.up_factor > 10_000 || torrent.down_factor > 10_000 {
                    return Answer::error(400, "factors are percentages, 0 to 10000");
                }
                let change = registries
                    .iter()
                    .map(|r| r.put_torrent(*hash, torrent))
                    .fold(Change::Unchanged, strongest);
                log_change("torrent", &hex, change);
                changed(
                    change,
                    json!({ "info_hash": hex, "change": change_name(change) }),
                )
            }
            "DELETE" => {
                let deleted = registries
                    .iter()
                    .fold(false, |any, r| r.delete_torrent(hash) | any);
                if deleted {
                    log::info!("admin API: torrent {hex} deleted");
                }
                Answer::ok(json!({ "info_hash": hex, "deleted": deleted }))
            }
            _ => Answer::error(405, "torrents take GET, PUT and DELETE"),
        }
    }

    fn client_rules(&self, method: &str, body: &[u8]) -> Answer {
        let rules_json = |target: &AdminTarget| {
            let config = target.clients.current().to_config();
            json!({
                "tracker": target.protocol,
                "allow_peer_ids": config.allow_peer_ids,
                "deny_peer_ids": config.deny_peer_ids,
                "deny_user_agents": config.deny_user_agents,
            })
        };
        match method {
            "GET" => {
                let trackers: Vec<Value> = self.targets.iter().map(rules_json).collect();
                Answer::ok(json!({ "trackers": trackers }))
            }
            "PUT" => {
                let config: ClientConfig = match parse_body(body) {
                    Ok(config) => config,
                    Err(answer) => return answer,
                };
                let rules = match RuleSet::from_config(&config) {
                    Ok(rules) => rules,
                    Err(problem) => return Answer::error(400, problem),
                };
                let mut changed = false;
                for target in &self.targets {
                    changed |= target.clients.replace(rules.clone());
                }
                if changed {
                    log::info!(
                        "admin API: client rules replaced: {} allowed, {} denied peer-id prefixes, {} denied user agents",
                        config.allow_peer_ids.len(),
                        config.deny_peer_ids.len(),
                        config.deny_user_agents.len()
                    );
                }
                let change = if changed {
                    Change::Updated
                } else {
                    Change::Unchanged
                };
                let trackers: Vec<Value> = self.targets.iter().map(rules_json).collect();
                Answer::ok(json!({ "change": change_name(change), "trackers": trackers }))
            }
            _ => Answer::error(405, "client rules take GET and PUT"),
        }
    }

    /// Every tracker's interval, load and bounds.
    fn intervals(&self) -> Value {
        let trackers: Vec<Value> = self
            .targets
            .iter()
            .filter_map(|target| Some(interval_json(target.protocol, target.interval.as_ref()?)))
            .collect();
        json!({ "trackers": trackers })
    }

    /// `PUT /v1/interval/<tracker>`: `{"min": s, "max": s, "adaptive": bool,
    /// "fixed": s or null}`, each optional (what is left out stays).
    fn interval(&self, method: &str, tracker: &str, body: &[u8]) -> Answer {
        let Some((protocol, interval)) = self
            .targets
            .iter()
            .find(|target| target.protocol == tracker)
            .and_then(|target| Some((target.protocol, target.interval.as_ref()?)))
        else {
            return Answer::error(404, "no such tracker here (udp, http or ws)");
        };
        match method {
            "GET" => Answer::ok(interval_json(protocol, interval)),
            "PUT" => {
                #[derive(Deserialize)]
                #[serde(deny_unknown_fields)]
                struct Change {
                    min: Option<u32>,
                    max: Option<u32>,
                    adaptive: Option<bool>,
                    /// Left out: unchanged; `null`: no longer fixed.
                    #[serde(default, deserialize_with = "present")]
                    fixed: Option<Option<u32>>,
                }
                let change: Change = match parse_body(body) {
                    Ok(change) => change,
                    Err(answer) => return answer,
                };
                let before = interval.bounds();
                let bounds = shoal_worker::Bounds {
                    min: change.min.unwrap_or(before.min),
                    max: change.max.unwrap_or(before.max),
                    adaptive: change.adaptive.unwrap_or(before.adaptive),
                    fixed: change.fixed.unwrap_or(before.fixed),
                };
                match interval.set_bounds(bounds) {
                    Ok(changed) => {
                        if changed {
                            log::info!(
                                "admin API: {protocol} announce interval bounds {} to {} s, {}{}",
                                bounds.min,
                                bounds.max,
                                if bounds.adaptive {
                                    "adaptive"
                                } else {
                                    "fixed at the minimum"
                                },
                                bounds.fixed.map_or(String::new(), |fixed| format!(
                                    ", {fixed} s given whatever the load"
                                ))
                            );
                        }
                        let mut answer = interval_json(protocol, interval);
                        answer["change"] = json!(if changed { "updated" } else { "unchanged" });
                        Answer::ok(answer)
                    }
                    Err(problem) => Answer::error(400, problem),
                }
            }
            _ => Answer::error(405, "the interval takes GET and PUT"),
        }
    }

    /// Trackers whose access list is on, or the answer when there are none.
    fn lists(&self) -> Result<Vec<&AdminTarget>, Answer> {
        let on: Vec<&AdminTarget> = self
            .targets
            .iter()
            .filter(|t| t.access.mode() != AccessListMode::Off)
            .collect();
        if on.is_empty() {
            return Err(Answer::error(
                409,
                "the access list is off on every tracker (access_list.mode = \"off\")",
            ));
        }
        Ok(on)
    }

    fn access(&self, method: &str, hash: &[u8; 20]) -> Answer {
        let lists = match self.lists() {
            Ok(lists) => lists,
            Err(answer) => return answer,
        };
        let hex = hex(hash);
        let (add, remove): (&[[u8; 20]], &[[u8; 20]]) = match method {
            "GET" => {
                let trackers: Vec<Value> = lists
                    .iter()
                    .map(|t| {
                        json!({
                            "tracker": t.protocol,
                            "mode": mode_name(t.access.mode()),
                            "listed": t.access.listed(hash),
                            "served": t.access.allows(hash),
                        })
                    })
                    .collect();
                return Answer::ok(json!({ "info_hash": hex, "trackers": trackers }));
            }
            "PUT" => (std::slice::from_ref(hash), &[]),
            "DELETE" => (&[], std::slice::from_ref(hash)),
            _ => return Answer::error(405, "access-list entries take GET, PUT and DELETE"),
        };
        self.edit_lists(&lists, add, remove, json!({ "info_hash": hex }))
    }

    fn bulk_access(&self, body: &[u8]) -> Answer {
        let lists = match self.lists() {
            Ok(lists) => lists,
            Err(answer) => return answer,
        };
        let body: BulkBody = match parse_body(body) {
            Ok(body) => body,
            Err(answer) => return answer,
        };
        if body.add.len() + body.remove.len() > MAX_BULK {
            return Answer::error(400, format!("at most {MAX_BULK} info hashes per request"));
        }
        let parse = |list: &[String], name: &str| -> Result<Vec<[u8; 20]>, Answer> {
            list.iter()
                .enumerate()
                .map(|(index, text)| {
                    parse_hex_hash(text).map_err(|problem| {
                        Answer::error(400, format!("{name}[{index}]: {problem}"))
                    })
                })
                .collect()
        };
        let (add, remove) = match (parse(&body.add, "add"), parse(&body.remove, "remove")) {
            (Ok(add), Ok(remove)) => (add, remove),
            (Err(answer), _) | (_, Err(answer)) => return answer,
        };
        self.edit_lists(&lists, &add, &remove, json!({}))
    }

    /// Applies one edit to every list; the answer says what each did.
    fn edit_lists(
        &self,
        lists: &[&AdminTarget],
        add: &[[u8; 20]],
        remove: &[[u8; 20]],
        mut answer: Value,
    ) -> Answer {
        let mut trackers = Vec::with_capacity(lists.len());
        for target in lists {
            match target.access.edit(add, remove) {
                Ok(edit) => {
                    if edit.added + edit.removed > 0 {
                        log::info!(
                            "admin API: {} access list: {} added, {} removed, {} entries",
                            target.protocol,
                            edit.added,
                            edit.removed,
                            edit.len
                        );
                    }
                    trackers.push(json!({
                        "tracker": target.protocol,
                        "added": edit.added,
                        "removed": edit.removed,
                        "entries": edit.len,
                    }));
                }
                Err(problem) => {
                    trackers.push(json!({ "tracker": target.protocol, "refused": problem }));
                }
            }
        }
        let refused = trackers.iter().any(|t| t.get("refused").is_some());
        answer["trackers"] = Value::Array(trackers);
        Answer {
            status: if refused { 409 } else { 200 },
            body: answer,
        }
    }
}

/// A JSON body as `T`, or the answer saying what is wrong with it. The message names
/// fields, never values: a misplaced passkey must not come back in an error.
fn parse_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Answer> {
    serde_json::from_slice(body).map_err(|err| {
        let detail = err.to_string();
        let what = if detail.starts_with("unknown field") || detail.starts_with("missing field") {
            detail
                .split(" at line")
                .next()
                .unwrap_or_default()
                .to_owned()
        } else if err.is_data() {
            "a field has a value of the wrong type or out of range".to_owned()
        } else if err.is_eof() {
            "the body ends too soon (send a whole JSON object)".to_owned()
        } else {
            "not JSON".to_owned()
        };
        Answer::error(
            400,
            format!(
                "{what} (line {}, column {}; documents/admin-api.md)",
                err.line(),
                err.column()
            ),
        )
    })
}

/// 201 for something created, 200 otherwise.
fn changed(change: Change, body: Value) -> Answer {
    Answer {
        status: if change == Change::Created { 201 } else { 200 },
        body,
    }
}

/// Of two registries' changes, the one to report: created over updated over
/// unchanged.
fn strongest(a: Change, b: Change) -> Change {
    let rank = |change| match change {
        Change::Created => 2,
        Change::Updated => 1,
        Change::Unchanged => 0,
    };
    if rank(b) > rank(a) { b } else { a }
}

fn change_name(change: Change) -> &'static str {
    match change {
        Change::Created => "created",
        Change::Updated => "updated",
        Change::Unchanged => "unchanged",
    }
}

fn log_change(what: &str, name: &str, change: Change) {
    if change != Change::Unchanged {
        log::info!("admin API: {what} {name} {}", change_name(change));
    }
}

/// The ledger's live state of a user or torrent, as the API tells it.
fn live_json(live: &shoal_private::Live) -> Value {
    let pending = &live.pending;
    json!({
        "peers": live.peers,
        "seeding": live.seeding,
        "leeching": live.peers - live.seeding,
        "pairs": live.pairs,
        "pending": {
            "uploaded": pending.uploaded,
            "downloaded": pending.downloaded,
            "credited_uploaded": pending.credited_uploaded,
            "credited_downloaded": pending.credited_downloaded,
            "seed_seconds": pending.seed_seconds,
            "completed": pending.completed,
        },
    })
}

fn mode_name(mode: AccessListMode) -> &'static str {
    match mode {
        AccessListMode::Off => "off",
        AccessListMode::Allow => "allow",
        AccessListMode::Deny => "deny",
    }
}

fn hex(hash: &[u8; 20]) -> String {
    use std::fmt::Write as _;
    hash.iter().fold(String::with_capacity(40), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

#[cfg(test)]
mod tests;

/// One tracker's interval as the API tells it.
fn interval_json(protocol: &str, interval: &shoal_worker::AnnounceInterval) -> Value {
    use std::sync::atomic::Ordering::Relaxed;
    let bounds = interval.bounds();
    let gauges = interval.gauges();
    json!({
        "tracker": protocol,
        "interval": {
            "ipv4": interval.current(shoal_worker::Family::V4),
            "ipv6": interval.current(shoal_worker::Family::V6),
        },
        "min": bounds.min,
        "max": bounds.max,
        "adaptive": bounds.adaptive,
        "fixed": bounds.fixed,
        "jitter_percent": interval.settings().jitter_percent,
        "load": gauges.load_per_mille.load(Relaxed) as f64 / 1000.0,
        "capacity_announces_per_second": gauges.capacity.load(Relaxed),
    })
}
