//! The control socket server: a non-blocking Unix stream socket the control
//! thread polls ([`CtlServer::poll`]); it never waits.
//!
//! Each poll accepts new connections, reads what they sent, answers every
//! complete request line in arrival order (the handler runs them, then
//! [`CtlHandler::commit`] publishes their effect once, before any response
//! of the batch is queued), and writes what the sockets take. Memory per
//! connection is bounded: at most one request line plus a read chunk of
//! input (the kernel holds the rest, so a fast sender is slowed down), and
//! [`Limits::out_high`] plus one response of output (further requests wait);
//! a connection whose socket takes none of its waiting output for
//! [`Limits::stall`] (a client that does not read) is dropped and logged,
//! and so is an events subscriber with more than [`Limits::out_limit`]
//! unsent. No input makes it panic.

use super::protocol::{self, Command, CtlError, ErrorCode, Event, MAX_REQUEST_BYTES};
use crate::config::Config;
use serde_json::{json, Value};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What executes the commands: the SA manager of the control thread.
pub trait CtlHandler {
    /// Runs `cmd` (never [`Command::Events`], which the server handles) and
    /// returns its `result` JSON or the error to answer with. Changes may be
    /// staged until [`CtlHandler::commit`].
    fn handle(&mut self, cmd: &Command) -> Result<Value, CtlError>;
    /// Publishes what the requests handled since the last commit changed.
    /// Called once after each batch in which `handle` was called, before
    /// any response of that batch is written: a client that got `ok` for
    /// `sa.add` knows its SA is in use.
    fn commit(&mut self);
}

/// Bounds of a [`CtlServer`]; [`Limits::default`] is what `secgw run` uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Open connections (default 64); one more is accepted, answered with a
    /// `busy` error line and closed.
    pub max_connections: usize,
    /// Request lines answered per [`CtlServer::poll`] over all connections
    /// (default 4096): a flood of requests cannot stall the control thread.
    pub batch: usize,
    /// A connection's requests wait (unread) while more than this many
    /// bytes of its responses are unsent (default 1 MiB).
    pub out_high: usize,
    /// An events subscriber with more than this many bytes unsent when an
    /// event comes is dropped (default 64 MiB). Events come in bursts (a
    /// reload removing 20,000 SAs queues 20,000 `deleted` lines, ≈ 5 MB,
    /// in one control-loop round, faster than any client reads), so this
    /// bounds memory, not a reader's pace: a subscriber that reads nothing
    /// is dropped by [`Limits::stall`] (helper-103: at 4 MiB a reading
    /// subscriber was dropped in such a burst).
    pub out_limit: usize,
    /// A connection with output waiting that the socket has taken none of
    /// for this long (default 2 s) is dropped: its client does not read.
    pub stall: Duration,
    /// A connection that is not an events subscriber, has no output
    /// waiting and has completed no request line for this long (default
    /// 60 s) is closed, so idle clients cannot hold all `max_connections`
    /// slots: bytes of a line still unfinished do not count (a client
    /// trickling a byte at a time is idle).
    pub idle: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_connections: 64, batch: 4096, out_high: 1 << 20, out_limit: 64 << 20, stall: Duration::from_secs(2), idle: Duration::from_secs(60) }
    }
}

/// Bytes read from one connection per read call.
const READ_CHUNK: usize = 64 * 1024;
/// Connections accepted per poll.
const ACCEPTS_PER_POLL: usize = 64;

/// One client connection.
struct Conn {
    stream: UnixStream,
    /// Received bytes not yet answered: complete lines and the start of the
    /// next one (at most `MAX_REQUEST_BYTES` + a read chunk).
    inbuf: Vec<u8>,
    /// Bytes at the front of `inbuf` already answered; they are dropped
    /// once per [`Conn::read`], so answering a line does not move the rest
    /// of the buffer (pipelined requests cost O(1) each, not O(buffer)).
    start: usize,
    /// Discarding the rest of a line longer than `MAX_REQUEST_BYTES`.
    skipping: bool,
    /// The peer closed its sending side.
    eof: bool,
    /// Unsent output; `out[sent..]` is what is left.
    out: Vec<u8>,
    sent: usize,
    /// Last time the socket took output, or had none waiting.
    progress: Instant,
    /// Last time a request line was complete (or the client connected).
    last_request: Instant,
    /// Sent `events`.
    subscriber: bool,
    /// Drop it at the end of this poll.
    dead: bool,
}

impl Conn {
    fn new(stream: UnixStream) -> Conn {
        Conn {
            stream,
            inbuf: Vec::new(),
            start: 0,
            skipping: false,
            eof: false,
            out: Vec::new(),
            sent: 0,
            progress: Instant::now(),
            last_request: Instant::now(),
            subscriber: false,
            dead: false,
        }
    }

    fn unsent(&self) -> usize {
        self.out.len() - self.sent
    }

    /// Received bytes not yet answered.
    fn pending(&self) -> &[u8] {
        &self.inbuf[self.start..]
    }

    /// Reads what is available, while the input holds less than one
    /// maximal request line (the kernel holds the rest: backpressure).
    /// At most `2 * MAX_REQUEST_BYTES` per call, so a client streaming an
    /// endless line cannot keep the control thread here.
    fn read(&mut self) {
        let mut chunk = [0u8; READ_CHUNK];
        let mut budget = 2 * MAX_REQUEST_BYTES;
        self.inbuf.drain(..self.start);
        self.start = 0;
        while !self.eof && !self.dead && self.inbuf.len() <= MAX_REQUEST_BYTES && budget > 0 {
            match self.stream.read(&mut chunk) {
                Ok(0) => self.eof = true,
                Ok(n) => {
                    budget = budget.saturating_sub(n);
                    self.take(&chunk[..n]);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => self.dead = true,
            }
        }
    }

    /// Appends received bytes, dropping the rest of an oversized line.
    fn take(&mut self, mut data: &[u8]) {
        if self.skipping {
            match data.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    self.skipping = false;
                    data = &data[i + 1..];
                }
                None => return,
            }
        }
        self.inbuf.extend_from_slice(data);
    }

    /// The next request line to answer (without its `\n`): `Ok(line)`, or
    /// `Err(error)` for a line too long; `None` if no complete line is here.
    fn next_line(&mut self) -> Option<Result<Vec<u8>, CtlError>> {
        let line = self.take_line();
        if line.is_some() {
            self.last_request = Instant::now();
        }
        line
    }

    /// [`Conn::next_line`] without the idle clock.
    fn take_line(&mut self) -> Option<Result<Vec<u8>, CtlError>> {
        if let Some(i) = self.pending().iter().position(|&b| b == b'\n') {
            let line = self.inbuf[self.start..self.start + i].to_vec();
            self.start += i + 1;
            if line.len() > MAX_REQUEST_BYTES {
                return Some(Err(too_large()));
            }
            return Some(Ok(line));
        }
        if self.pending().len() > MAX_REQUEST_BYTES {
            self.inbuf.clear();
            self.start = 0;
            self.skipping = true;
            return Some(Err(too_large()));
        }
        if self.eof && !self.pending().is_empty() {
            // A last line without its newline.
            let line = self.pending().to_vec();
            self.inbuf.clear();
            self.start = 0;
            return Some(Ok(line));
        }
        None
    }

    fn queue(&mut self, line: &str) {
        if self.unsent() == 0 {
            self.progress = Instant::now();
        }
        self.out.extend_from_slice(line.as_bytes());
    }

    /// Writes what the socket takes.
    fn flush(&mut self) {
        while self.sent < self.out.len() && !self.dead {
            match self.stream.write(&self.out[self.sent..]) {
                Ok(0) => self.dead = true,
                Ok(n) => {
                    self.sent += n;
                    self.progress = Instant::now();
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => self.dead = true,
            }
        }
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
        } else if self.sent > self.out.len() / 2 {
            self.out.drain(..self.sent);
            self.sent = 0;
        }
    }

    /// Nothing left to answer and the peer is gone, or the peer stopped
    /// reading.
    fn finished(&self, limits: &Limits) -> Option<&'static str> {
        if self.dead {
            return Some("connection error");
        }
        if self.unsent() > 0 && self.progress.elapsed() > limits.stall {
            return Some("client does not read its responses");
        }
        if !self.subscriber && self.unsent() == 0 && self.last_request.elapsed() > limits.idle {
            return Some("idle: no request within the idle limit");
        }
        // At the end of input the rest of an oversized line being skipped
        // is over too: its error was queued when the skipping began.
        if self.eof && self.unsent() == 0 && (self.subscriber || self.pending().is_empty()) {
            return Some("");
        }
        None
    }
}

fn too_large() -> CtlError {
    CtlError::new(ErrorCode::TooLarge, format!("request line longer than {MAX_REQUEST_BYTES} bytes"))
}

/// The control socket server.
pub struct CtlServer {
    path: PathBuf,
    /// Device and inode of the socket file we bound: Drop removes the file
    /// only if it is still ours.
    ino: (u64, u64),
    listener: UnixListener,
    conns: Vec<Conn>,
    limits: Limits,
    /// Connection to read first next poll (round robin).
    next: usize,
}

impl CtlServer {
    /// Binds the control socket at `path` with [`Limits::default`].
    ///
    /// Creates the parent directory (mode 0700) if it is missing; refuses
    /// (`AddrInUse`) when a server answers on `path` already, and
    /// (`AlreadyExists`) when `path` is something else than a socket;
    /// replaces a stale socket file. The socket file has mode 0600 from the
    /// moment it appears at `path` (bound under a temporary name, then
    /// renamed). Errors: those of the file system calls, with the path.
    pub fn bind(path: &Path) -> std::io::Result<CtlServer> {
        CtlServer::bind_with(path, Limits::default())
    }

    /// [`CtlServer::bind`] with other limits.
    pub fn bind_with(path: &Path, limits: Limits) -> std::io::Result<CtlServer> {
        let ctx = |what: &str, e: std::io::Error| std::io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()));
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
            std::fs::create_dir_all(dir).map_err(|e| ctx("creating the directory of", e))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| ctx("setting mode 0700 on the directory of", e))?;
        }
        match std::fs::symlink_metadata(path) {
            Ok(m) if !m.file_type().is_socket() => {
                return Err(std::io::Error::new(
                    ErrorKind::AlreadyExists,
                    format!("{} exists and is not a socket; not replacing it", path.display()),
                ));
            }
            Ok(_) => {
                if UnixStream::connect(path).is_ok() {
                    return Err(std::io::Error::new(
                        ErrorKind::AddrInUse,
                        format!("{}: a secgw is already listening there", path.display()),
                    ));
                }
                tracing::info!(path = %path.display(), "removing stale control socket");
                std::fs::remove_file(path).map_err(|e| ctx("removing the stale socket", e))?;
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(ctx("inspecting", e)),
        }
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".{}.tmp", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let _ = std::fs::remove_file(&tmp);
        let listener = UnixListener::bind(&tmp).map_err(|e| ctx("binding", e))?;
        let placed = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
            .and_then(|_| std::fs::rename(&tmp, path))
            .and_then(|_| listener.set_nonblocking(true))
            .and_then(|_| std::fs::symlink_metadata(path));
        let meta = match placed {
            Ok(m) => m,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(ctx("placing the socket", e));
            }
        };
        Ok(CtlServer { path: path.to_path_buf(), ino: (meta.dev(), meta.ino()), listener, conns: Vec::new(), limits, next: 0 })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Connections that sent `events`.
    pub fn subscribers(&self) -> usize {
        self.conns.iter().filter(|c| c.subscriber).count()
    }

    /// One round of work, without waiting: accept, read, answer up to
    /// [`Limits::batch`] request lines in arrival order per connection
    /// (calling `h.handle` for each command but `events`, then `h.commit`
    /// once if it was called), queue and write the responses, drop finished
    /// or stalled connections. Returns the number of request lines answered
    /// (errors included).
    pub fn poll(&mut self, h: &mut impl CtlHandler) -> usize {
        self.accept();
        let n = self.conns.len();
        // (connection, response line), in arrival order per connection.
        let mut answers: Vec<(usize, String)> = Vec::new();
        let mut handled = false;
        for k in 0..n {
            let ci = (self.next + k) % n;
            let c = &mut self.conns[ci];
            c.read();
            // This connection's responses of this batch, in bytes: its
            // requests wait once its output passes `out_high`.
            let mut queued = 0usize;
            while answers.len() < self.limits.batch && !c.dead && c.unsent() + queued <= self.limits.out_high {
                let Some(line) = c.next_line() else { break };
                let parsed = line.map_err(|e| (None, e)).and_then(|l| protocol::parse_request(&l).map_err(|e| (e.id, e.error)));
                let (id, answer) = match parsed {
                    Err((id, e)) => (id, Err(e)),
                    Ok(req) if req.command == Command::Events => {
                        c.subscriber = true;
                        (req.id, Ok(json!({"subscribed": true})))
                    }
                    Ok(req) => {
                        handled = true;
                        let r = h.handle(&req.command);
                        if let Err(e) = &r {
                            tracing::debug!(cmd = req.command.name(), error = %e, "control request failed");
                        }
                        (req.id, r)
                    }
                };
                let out = match answer {
                    Ok(result) => protocol::ok_line(id.as_ref(), result),
                    Err(e) => protocol::error_line(id.as_ref(), &e),
                };
                queued += out.len();
                answers.push((ci, out));
            }
            // Room was made: take what arrived meanwhile (answered next poll).
            c.read();
        }
        if n > 0 {
            self.next = (self.next + 1) % n;
        }
        // Publish before any response of the batch is written.
        if handled {
            h.commit();
        }
        let count = answers.len();
        for (ci, line) in answers {
            self.conns[ci].queue(&line);
        }
        self.flush_and_reap();
        count
    }

    /// Sends `ev` to every `events` subscriber; one that lets more than
    /// [`Limits::out_limit`] pile up is dropped at once (its last line may
    /// be cut: a line without its newline is no event).
    pub fn broadcast(&mut self, ev: &Event) {
        let line = protocol::event_line(ev);
        let limit = self.limits.out_limit;
        for c in self.conns.iter_mut().filter(|c| c.subscriber && !c.dead) {
            if c.unsent() > limit {
                tracing::warn!(path = %self.path.display(), "dropping an events subscriber that fell behind: {} bytes unsent, more than the {}-byte limit", c.unsent(), limit);
                c.dead = true;
                continue;
            }
            c.queue(&line);
        }
        self.flush_and_reap();
    }

    fn accept(&mut self) {
        for _ in 0..ACCEPTS_PER_POLL {
            let stream = match self.listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and the like: leave it queued, try next poll.
                    tracing::warn!(path = %self.path.display(), error = %e, "control socket accept failed");
                    return;
                }
            };
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            if self.conns.len() >= self.limits.max_connections {
                let e = CtlError::busy(format!("too many connections (limit {})", self.limits.max_connections));
                let mut s = stream;
                let _ = s.write(protocol::error_line(None, &e).as_bytes());
                // What the client already sent is discarded and our side
                // shut down, so closing sends FIN, not a reset that could
                // overtake the busy line (unread input makes a close a
                // reset: unix(7)).
                let mut sink = [0u8; 4096];
                for _ in 0..16 {
                    if !matches!(s.read(&mut sink), Ok(n) if n > 0) {
                        break;
                    }
                }
                let _ = s.shutdown(std::net::Shutdown::Write);
                tracing::warn!(path = %self.path.display(), "control socket: connection refused, {} open", self.conns.len());
                continue;
            }
            self.conns.push(Conn::new(stream));
        }
    }

    fn flush_and_reap(&mut self) {
        let limits = self.limits;
        let path = &self.path;
        self.conns.retain_mut(|c| {
            c.flush();
            match c.finished(&limits) {
                None => true,
                Some("") => false,
                // A client gone before reading its answers: its business.
                Some(why) if c.dead => {
                    tracing::debug!(path = %path.display(), unsent = c.unsent(), "dropping control connection: {why}");
                    false
                }
                Some(why) => {
                    tracing::warn!(path = %path.display(), unsent = c.unsent(), "dropping control connection: {why}");
                    false
                }
            }
        });
        if self.next >= self.conns.len() {
            self.next = 0;
        }
    }
}

impl Drop for CtlServer {
    fn drop(&mut self) {
        // Remove the socket file only if it is still the one we bound.
        if let Ok(m) = std::fs::symlink_metadata(&self.path) {
            if (m.dev(), m.ino()) == self.ino {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// The control socket path `secgw run` uses: `--socket` if given, else the
/// config's `control.socket` (default `/run/secgw/<gateway.name>.sock`).
pub fn socket_path(cfg: &Config, opts: &super::RunOptions) -> PathBuf {
    opts.socket.clone().unwrap_or_else(|| cfg.control.socket.clone())
}
