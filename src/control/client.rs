//! The client side of the control socket (`secgw ctl`): requests, the
//! event stream, and the text `secgw ctl` prints for results.
//!
//! The renderers take the result JSON as the server sends it and ignore
//! fields they do not know, so a newer server's extra fields do not break
//! an older client. Nothing here prints key material: `sa list` shows no
//! key even if a server sent one.

use super::protocol::{self, Command, ErrorCode, Event, ServerLine};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The socket `secgw ctl` uses without `--socket`: `$SECGW_SOCKET`, else
/// `/run/secgw/secgw.sock` (the default of a gateway named "secgw").
pub fn default_socket() -> PathBuf {
    std::env::var_os("SECGW_SOCKET").filter(|s| !s.is_empty()).map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/run/secgw/secgw.sock"))
}

/// How long [`Client::call`] waits for a response (60 s: a reload of a
/// large config takes a while).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);

/// Errors of the client.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing listens at the socket path (or it cannot be reached).
    #[error("cannot connect to {}: {source}", path.display())]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Reading or writing the connection failed (timeout included).
    #[error("control socket: {0}")]
    Io(#[from] std::io::Error),
    /// The server closed the connection.
    #[error("the server closed the connection")]
    Closed,
    /// The server answered with an error.
    #[error("{code}: {message}")]
    Server {
        /// The error code.
        code: ErrorCode,
        /// The server's message.
        message: String,
    },
    /// The server sent something that is not the protocol.
    #[error("bad line from the server: {0}")]
    Protocol(String),
    /// The request would be longer than the server reads
    /// ([`protocol::MAX_REQUEST_BYTES`]); nothing was sent.
    #[error("the request is {0} bytes, over the {max}-byte limit of a control socket request (for `sa add`: split the fragment into several)", max = protocol::MAX_REQUEST_BYTES)]
    TooLarge(usize),
}

/// A connection to the control socket; requests can be pipelined with
/// [`Client::send`] and [`Client::recv`].
pub struct Client {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    next_id: u64,
}

impl Client {
    /// Connects to the socket at `path`. Errors: [`ClientError::Connect`].
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        let connect = |source| ClientError::Connect { path: path.to_path_buf(), source };
        let writer = UnixStream::connect(path).map_err(connect)?;
        writer.set_read_timeout(Some(RESPONSE_TIMEOUT)).map_err(connect)?;
        let reader = BufReader::new(writer.try_clone().map_err(connect)?);
        Ok(Client { writer, reader, next_id: 1 })
    }

    /// Sends `cmd` with a fresh numeric id, which it returns.
    pub fn send(&mut self, cmd: &Command) -> Result<u64, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        let line = protocol::request_line(Some(&id.into()), cmd);
        // The server would answer `too_large` about a line the user never
        // wrote: say it here, before sending, in the user's terms.
        let len = line.strip_suffix('\n').unwrap_or(&line).len();
        if len > protocol::MAX_REQUEST_BYTES {
            return Err(ClientError::TooLarge(len));
        }
        self.writer.write_all(line.as_bytes())?;
        Ok(id)
    }

    /// The next line from the server (a response or an event). Errors:
    /// [`ClientError::Closed`] at the end of the connection, also after
    /// the start of a line without its newline (a server that dropped
    /// this client cuts its last line; that is no line).
    pub fn recv_line(&mut self) -> Result<ServerLine, ClientError> {
        let mut line = Vec::new();
        self.reader.read_until(b'\n', &mut line)?;
        let Some(line) = line.strip_suffix(b"\n") else { return Err(ClientError::Closed) };
        protocol::parse_server_line(line).map_err(ClientError::Protocol)
    }

    /// The next response, skipping events: its id, and its result or the
    /// server's error as [`ClientError::Server`].
    pub fn recv(&mut self) -> Result<(Option<Value>, Result<Value, ClientError>), ClientError> {
        loop {
            if let ServerLine::Response { id, result } = self.recv_line()? {
                return Ok((id, result.map_err(|e| ClientError::Server { code: e.code, message: e.message })));
            }
        }
    }

    /// Sends `cmd` and waits for its response: the `result` JSON.
    pub fn call(&mut self, cmd: &Command) -> Result<Value, ClientError> {
        let id = self.send(cmd)?;
        let (got, result) = self.recv()?;
        // An error without an id answers no request: the server refused the
        // connection (`busy`) or could not read the line; its error is the
        // answer.
        if got.is_none() && result.is_err() {
            return result;
        }
        if got != Some(id.into()) {
            return Err(ClientError::Protocol(format!("response to request {id} came with id {got:?}")));
        }
        result
    }
}

/// One request on a fresh connection: the `result` JSON, or the error.
pub fn request(socket: &Path, cmd: &Command) -> Result<Value, ClientError> {
    Client::connect(socket)?.call(cmd)
}

/// Subscribes to SA events and calls `f` with each until it returns false
/// (then `Ok`). Waits without a time limit. Errors: connecting, the
/// subscription refused, or the connection lost ([`ClientError::Closed`]
/// when the server stops).
pub fn events(socket: &Path, mut f: impl FnMut(Event) -> bool) -> Result<(), ClientError> {
    let mut c = Client::connect(socket)?;
    c.call(&Command::Events)?;
    c.writer.set_read_timeout(None)?;
    loop {
        if let ServerLine::Event(ev) = c.recv_line()? {
            if !f(ev) {
                return Ok(());
            }
        }
    }
}

/// Key material for `sa rekey`, read from a file or stdin (never argv):
/// either one line of hex (the cipher key material, salt included), or
/// TOML with `key = "hex"` and optional `auth_key = "hex"`. Returns
/// (key, auth_key) as given (the server checks the hex and the lengths).
/// Errors say what is wrong, never what the key is.
pub fn parse_key_file(text: &str) -> Result<(String, Option<String>), String> {
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    match lines.as_slice() {
        [] => return Err("empty: expected one line of hex, or TOML with key = \"hex\" and optional auth_key = \"hex\"".into()),
        // One line without `=`: meant as hex; say where it is not.
        [one] if !one.contains('=') => {
            return match one.chars().enumerate().find(|(_, c)| !(c.is_ascii_hexdigit() || *c == ':')) {
                None => Ok((one.to_string(), None)),
                Some((i, c)) => Err(format!(
                    "expected one line of hex (as sa.key: hex digits, ':' separators allowed, no 0x prefix): {c:?} at character {} of the line",
                    i + 1
                )),
            };
        }
        _ => {}
    }
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct KeyFile {
        key: String,
        auth_key: Option<String>,
    }
    match toml::from_str::<KeyFile>(text) {
        Ok(k) => Ok((k.key, k.auth_key)),
        // toml's messages quote the offending line: keep only the first line.
        Err(e) => Err(format!(
            "expected one line of hex, or TOML with key = \"hex\" and optional auth_key = \"hex\" ({})",
            e.message().lines().next().unwrap_or("")
        )),
    }
}

fn str_of<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("-")
}

fn num_of(v: &Value, k: &str) -> String {
    match v.get(k) {
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(s)) => s.clone(),
        _ => "-".into(),
    }
}

/// `age_s` seconds as `12.3s`, `4m05s`, `2h03m` or `3d04h`.
pub fn format_age(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "-".into();
    }
    let s = secs as u64;
    match s {
        _ if secs < 60.0 => format!("{secs:.1}s"),
        0..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// Lays out rows under a header, each column as wide as its widest cell;
/// columns in `right` are right-aligned (numbers).
fn table(header: &[&str], rows: &[Vec<String>], right: &[usize]) -> String {
    let mut w: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let mut o = String::new();
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for r in std::iter::once(&header).chain(rows) {
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| if right.contains(&i) { format!("{c:>0$}", w[i]) } else { format!("{c:<0$}", w[i]) })
            .collect();
        o.push_str(cells.join("  ").trim_end());
        o.push('\n');
    }
    o
}

/// `sa list` as a table: spi, direction, mode, algorithm, tunnel_src →
/// tunnel_dst, worker, state, packets, bytes, errors, age; from the
/// `sa.list` result `{"sas":[…]}`. Never keys. Errors: no `sas` array.
pub fn render_sa_table(result: &Value) -> Result<String, String> {
    let sas = result.get("sas").and_then(Value::as_array).ok_or("sa.list result without an \"sas\" array")?;
    let rows: Vec<Vec<String>> = sas
        .iter()
        .map(|s| {
            let tunnel = match (s.get("tunnel_src").and_then(Value::as_str), s.get("tunnel_dst").and_then(Value::as_str)) {
                (Some(a), Some(b)) => format!("{a} → {b}"),
                _ => "-".into(),
            };
            vec![
                num_of(s, "spi"),
                str_of(s, "direction").into(),
                str_of(s, "mode").into(),
                str_of(s, "algorithm").into(),
                tunnel,
                num_of(s, "worker"),
                str_of(s, "state").into(),
                num_of(s, "packets"),
                num_of(s, "bytes"),
                num_of(s, "errors"),
                s.get("age_s").and_then(Value::as_f64).map_or("-".into(), format_age),
            ]
        })
        .collect();
    let header = ["spi", "direction", "mode", "algorithm", "tunnel", "worker", "state", "packets", "bytes", "errors", "age"];
    Ok(table(&header, &rows, &[5, 7, 8, 9, 10]))
}

/// `neigh list` as a table: ip, mac, port, state, age; from the
/// `neigh.list` result `{"neighbours":[…]}`. Errors: no `neighbours` array.
pub fn render_neigh_table(result: &Value) -> Result<String, String> {
    let ns = result.get("neighbours").and_then(Value::as_array).ok_or("neigh.list result without a \"neighbours\" array")?;
    let rows: Vec<Vec<String>> = ns
        .iter()
        .map(|n| {
            vec![
                str_of(n, "ip").into(),
                str_of(n, "mac").into(),
                n.get("port").and_then(Value::as_str).unwrap_or("any").into(),
                str_of(n, "state").into(),
                n.get("age_ms").and_then(Value::as_f64).map_or("-".into(), |ms| format_age(ms / 1000.0)),
            ]
        })
        .collect();
    Ok(table(&["ip", "mac", "port", "state", "age"], &rows, &[4]))
}

/// `policy list` as a table from the `policy.list` result
/// `{"policies":[…]}`. Errors: no `policies` array.
pub fn render_policy_table(result: &Value) -> Result<String, String> {
    let ps = result.get("policies").and_then(Value::as_array).ok_or("policy.list result without a \"policies\" array")?;
    let rows: Vec<Vec<String>> = ps
        .iter()
        .enumerate()
        .map(|(i, p)| {
            vec![
                i.to_string(),
                str_of(p, "direction").into(),
                str_of(p, "src").into(),
                str_of(p, "dst").into(),
                num_of(p, "protocol"),
                str_of(p, "src_ports").into(),
                str_of(p, "dst_ports").into(),
                num_of(p, "priority"),
                str_of(p, "action").into(),
            ]
        })
        .collect();
    Ok(table(&["#", "direction", "src", "dst", "protocol", "src_ports", "dst_ports", "priority", "action"], &rows, &[0, 7]))
}

/// `stats` as text: the JSON result read back into a snapshot and shown as
/// `secgw run` prints it. Errors: not a snapshot this build understands.
pub fn render_stats_text(result: &Value) -> Result<String, String> {
    super::stats::Snapshot::from_json_value(result).map(|s| s.to_text())
}

/// One event as a line of text: time (UTC), kind, SA, then what is set.
pub fn render_event(ev: &Event) -> String {
    let kind = serde_json::to_value(ev.kind).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
    let mut o = format!("{} {kind} spi {} {}", format_time(ev.time), ev.spi, ev.direction);
    if let Some(d) = ev.dst {
        o.push_str(&format!(" dst {d}"));
    }
    if let Some(n) = ev.new_spi {
        o.push_str(&format!(" → spi {n}"));
    }
    if let Some(r) = &ev.reason {
        o.push_str(&format!(" reason={r}"));
    }
    if let Some(p) = ev.packets {
        o.push_str(&format!(" packets={p}"));
    }
    if let Some(b) = ev.bytes {
        o.push_str(&format!(" bytes={b}"));
    }
    if !ev.message.is_empty() {
        o.push_str(": ");
        o.push_str(&ev.message.replace('\n', " "));
    }
    o
}

/// Unix seconds as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC; proleptic Gregorian,
/// the civil-from-days algorithm).
pub fn format_time(t: f64) -> String {
    if !(0.0..=253_402_300_799.0).contains(&t) {
        return format!("{t}");
    }
    let ms = (t * 1000.0).round() as u64;
    let (days, rem) = ((ms / 86_400_000) as i64, ms % 86_400_000);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (h, mi, s, milli) = (rem / 3_600_000, rem / 60_000 % 60, rem / 1000 % 60, rem % 1000);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{milli:03}Z")
}

/// A small result (`sa add`, `sa del`, `sa rekey`, `reload`) on one line:
/// `key=value` pairs of an object, the JSON of anything else; a
/// `warnings` list of strings (`reload`: what `secgw check` says of the
/// file applied) follows, one `warning: …` line each.
pub fn render_compact(result: &Value) -> String {
    match result {
        Value::Object(m) if !m.is_empty() => {
            let mut out = m
                .iter()
                .filter(|(k, _)| k.as_str() != "warnings")
                .map(|(k, v)| match v {
                    Value::String(s) => format!("{k}={s}"),
                    other => format!("{k}={other}"),
                })
                .collect::<Vec<_>>()
                .join(" ");
            for w in m.get("warnings").and_then(Value::as_array).into_iter().flatten() {
                out.push_str("\nwarning: ");
                out.push_str(w.as_str().unwrap_or_default());
            }
            out
        }
        Value::Null => "ok".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::protocol::EventKind;
    use serde_json::json;

    #[test]
    fn sa_table_shows_the_columns_and_never_keys() {
        let r = json!({"sas":[
            {"spi":1000,"direction":"outbound","mode":"tunnel","algorithm":"aes-128-gcm","tunnel_src":"203.0.113.1",
             "tunnel_dst":"203.0.113.2","worker":0,"esn":false,"udp_encap":false,"state":"active","age_s":1.5,
             "packets":12,"bytes":3400,"errors":0,"key":"00112233445566778899aabbccddeeff","future":{"x":1}},
            {"spi":4294967295u32,"direction":"inbound","mode":"transport","algorithm":"null-hmac-sha256",
             "worker":1,"state":"retiring","age_s":3725.0,"packets":0,"bytes":0,"errors":7}
        ]});
        let t = render_sa_table(&r).unwrap();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        let cols: Vec<&str> = lines[0].split_whitespace().collect();
        assert_eq!(cols, ["spi", "direction", "mode", "algorithm", "tunnel", "worker", "state", "packets", "bytes", "errors", "age"]);
        assert!(lines[1].contains("203.0.113.1 → 203.0.113.2") && lines[1].contains("active") && lines[1].ends_with("1.5s"), "{t}");
        assert!(lines[2].starts_with("4294967295  inbound") && lines[2].contains("retiring") && lines[2].ends_with("1h02m"), "{t}");
        assert!(!t.contains("0011223344"), "a key leaked:\n{t}");
        // Numbers are right-aligned under their header.
        let chars = |l: &str| l.chars().collect::<Vec<char>>();
        let (head, row) = (chars(lines[0]), chars(lines[1]));
        let end = (0..head.len()).find(|&i| head[i..].starts_with(&['b', 'y', 't', 'e', 's'])).unwrap() + 5;
        assert_eq!(row[end - 4..end].iter().collect::<String>(), "3400", "{t}");
        assert_eq!(row[end], ' ', "{t}");
        assert!(render_sa_table(&json!({"x":[]})).is_err());
    }

    #[test]
    fn policy_table() {
        let r = json!({"policies":[{"direction":"outbound","src":"192.0.2.0/24","dst":"198.51.100.0/24","protocol":"udp",
            "src_ports":"0-65535","dst_ports":"5000-5001","priority":10,"action":"protect 1000"},
            {"direction":"inbound","src":"0.0.0.0/0","dst":"0.0.0.0/0","protocol":17,"priority":100,"action":"discard"}]});
        let t = render_policy_table(&r).unwrap();
        let l: Vec<Vec<&str>> = t.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(l[0][0], "#");
        assert_eq!(l[1], ["0", "outbound", "192.0.2.0/24", "198.51.100.0/24", "udp", "0-65535", "5000-5001", "10", "protect", "1000"]);
        assert_eq!(l[2], ["1", "inbound", "0.0.0.0/0", "0.0.0.0/0", "17", "-", "-", "100", "discard"]);
    }

    #[test]
    fn ages_and_times() {
        assert_eq!(format_age(0.04), "0.0s");
        assert_eq!(format_age(59.9), "59.9s");
        assert_eq!(format_age(60.0), "1m00s");
        assert_eq!(format_age(3599.0), "59m59s");
        assert_eq!(format_age(86_400.0 + 3600.0), "1d01h");
        assert_eq!(format_age(f64::NAN), "-");
        // Reference values from GNU date -u -d @N.
        assert_eq!(format_time(0.0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_time(951_782_400.5), "2000-02-29T00:00:00.500Z");
        assert_eq!(format_time(1_709_251_199.999), "2024-02-29T23:59:59.999Z");
        assert_eq!(format_time(4_102_444_800.0), "2100-01-01T00:00:00.000Z");
    }

    #[test]
    fn events_render_on_one_line() {
        let ev = Event {
            kind: EventKind::Rekeyed,
            spi: 1000,
            direction: "outbound".into(),
            dst: None,
            reason: None,
            message: "rekeyed\nby ctl".into(),
            time: 0.0,
            new_spi: Some(1002),
            packets: Some(5),
            bytes: None,
        };
        assert_eq!(render_event(&ev), "1970-01-01T00:00:00.000Z rekeyed spi 1000 outbound → spi 1002 packets=5: rekeyed by ctl");
    }

    #[test]
    fn key_files() {
        assert_eq!(parse_key_file("00112233aabbccdd\n"), Ok(("00112233aabbccdd".into(), None)));
        assert_eq!(parse_key_file("# new key\n  00:11:22  \n\n"), Ok(("00:11:22".into(), None)));
        assert_eq!(parse_key_file("key = \"0011\"\nauth_key = \"ffee\"\n"), Ok(("0011".into(), Some("ffee".into()))));
        assert_eq!(parse_key_file("key = \"0011\""), Ok(("0011".into(), None)));
        for bad in ["", "0011\n2233\n", "key = \"0011\"\nauth = \"x\"", "zz11"] {
            let e = parse_key_file(bad).unwrap_err();
            assert!(!e.contains("0011") && !e.contains("2233"), "key material in the error: {e}");
        }
        // What is wrong, and where (helper-95: a 0x prefix got TOML's "expected '.', '='").
        assert_eq!(parse_key_file("0x0011\n").unwrap_err(), "expected one line of hex (as sa.key: hex digits, ':' separators allowed, no 0x prefix): 'x' at character 2 of the line");
        assert!(parse_key_file("# only a comment\n").unwrap_err().starts_with("empty: "));
    }

    #[test]
    fn compact_results() {
        assert_eq!(render_compact(&json!({"added":2,"spis":[1,2],"state":"active"})), "added=2 spis=[1,2] state=active");
        assert_eq!(render_compact(&Value::Null), "ok");
        assert_eq!(render_compact(&json!({})), "{}");
    }
}
