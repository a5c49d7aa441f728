//! Packet I/O: the port API and its backends.
//!
//! A [`Port`] moves bursts of Ethernet frames between an interface and
//! [`PktBuf`]s, the gateway's packet buffers (DPDK's mbufs). A `PktBuf` is a
//! fixed-size buffer allocated once at start-up with [`HEADROOM`] bytes in
//! front of the frame, so ESP encapsulation grows into headroom and tailroom
//! without allocating per packet.
//!
//! Backends: [`af_xdp`] (AF_XDP sockets through `xsk-rs`) and [`mem`]
//! (in-memory port pairs for tests).

pub mod af_xdp;
pub mod mem;

/// Total bytes of one packet buffer (headroom + frame + tailroom).
pub const BUF_SIZE: usize = 2048 + HEADROOM;
/// Bytes reserved in front of a received frame for the outer headers an
/// outbound SA prepends (outer IPv4 20 + ESP 8 + IV 8 = 36 for tunnel mode,
/// 16-byte IV for AES-CBC, 8 more for the UDP header of NAT-T, RFC 3948;
/// with room to spare for later modes).
pub const HEADROOM: usize = 128;

/// One packet buffer: `BUF_SIZE` bytes, the frame at `[head, head + len)`.
///
/// Invariant: `head + len <= BUF_SIZE`.
pub struct PktBuf {
    /// A thin pointer to a fixed-size array (not a slice): the buffer
    /// moves as three words through the per-packet path, and its bounds
    /// are known to the compiler.
    data: Box<[u8; BUF_SIZE]>,
    head: u32,
    len: u32,
    /// Port the frame was received on.
    pub port: u16,
    /// Worker whose pool the buffer belongs to (buffers handed to another
    /// worker go back home when freed).
    pub home: u16,
    /// Nonzero when the packet's outer packet, once encrypted, is to be
    /// fragmented (RFC 4213 §3.2, RFC 2473 §7.1: an IPv6 inner packet of at
    /// most 1280 bytes over a tunnel MTU below 1280): the tunnel MTU in
    /// bytes, to which the gateway cuts an IPv6 outer packet itself; an
    /// IPv4 outer header gets DF clear instead. 0 = no such fragmentation.
    /// Set by the worker before ESP prepare, it travels with the buffer
    /// through a handoff and the crypto device (as a DPDK mbuf's
    /// `tso_segsz`); cleared whenever the buffer takes a new frame
    /// ([`PktBuf::reset`], [`PktBuf::copy_from`], [`PktBuf::move_to_area`]).
    pub outer_frag_mtu: u16,
}

impl std::fmt::Debug for PktBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PktBuf").field("head", &self.head).field("len", &self.len).field("port", &self.port).finish()
    }
}

impl Default for PktBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl PktBuf {
    /// A zeroed buffer with the frame empty at `HEADROOM`. Allocates: call at
    /// start-up only.
    pub fn new() -> Self {
        let data: Box<[u8; BUF_SIZE]> = vec![0u8; BUF_SIZE].into_boxed_slice().try_into().expect("BUF_SIZE bytes");
        PktBuf { data, head: HEADROOM as u32, len: 0, port: 0, home: 0, outer_frag_mtu: 0 }
    }

    /// The frame bytes.
    #[inline]
    pub fn frame(&self) -> &[u8] {
        &self.data[self.head as usize..(self.head + self.len) as usize]
    }

    /// The frame bytes, mutable.
    #[inline]
    pub fn frame_mut(&mut self) -> &mut [u8] {
        &mut self.data[self.head as usize..(self.head + self.len) as usize]
    }

    /// Frame length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True when the frame is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes free in front of the frame.
    #[inline]
    pub fn headroom(&self) -> usize {
        self.head as usize
    }

    /// Bytes free after the frame.
    #[inline]
    pub fn tailroom(&self) -> usize {
        BUF_SIZE - (self.head + self.len) as usize
    }

    /// Resets to an empty frame at `HEADROOM` and returns the writable area
    /// for a new frame of up to `BUF_SIZE - HEADROOM` bytes; finish with
    /// [`PktBuf::set_len`]. The bytes in the area are left as they are.
    #[inline]
    pub fn reset(&mut self) -> &mut [u8] {
        self.head = HEADROOM as u32;
        self.len = 0;
        self.outer_frag_mtu = 0;
        &mut self.data[HEADROOM..]
    }

    /// Sets the frame length after writing into [`PktBuf::reset`]'s area.
    /// Returns false (and changes nothing) if it would not fit.
    #[inline]
    pub fn set_len(&mut self, len: usize) -> bool {
        if self.head as usize + len > BUF_SIZE {
            return false;
        }
        self.len = len as u32;
        true
    }

    /// Moves the frame bytes `from` (a range of the current frame) to offset
    /// `to` of the area [`PktBuf::reset`] returns (the ranges may overlap)
    /// and leaves the frame empty at `HEADROOM`, the moved bytes in place
    /// for a later [`PktBuf::reset`] / [`PktBuf::set_len`]. Returns false,
    /// changing nothing, if `from` is not inside the frame or the bytes would
    /// not fit in the area. Used by IP reassembly to turn a fragment's own
    /// buffer into the datagram's assembly buffer without a second buffer.
    pub fn move_to_area(&mut self, from: std::ops::Range<usize>, to: usize) -> bool {
        if from.start > from.end || from.end > self.len as usize || to.saturating_add(from.end - from.start) > BUF_SIZE - HEADROOM {
            return false;
        }
        let head = self.head as usize;
        self.data.copy_within(head + from.start..head + from.end, HEADROOM + to);
        self.head = HEADROOM as u32;
        self.len = 0;
        self.outer_frag_mtu = 0;
        true
    }

    /// Copies `bytes` in as the whole frame, at `HEADROOM`. Returns false if
    /// it does not fit.
    pub fn copy_from(&mut self, bytes: &[u8]) -> bool {
        let area = self.reset();
        if bytes.len() > area.len() {
            return false;
        }
        area[..bytes.len()].copy_from_slice(bytes);
        self.len = bytes.len() as u32;
        true
    }

    /// Grows the frame by `n` bytes at the front (into headroom); the new
    /// bytes are not initialised. Returns false if headroom is short.
    #[inline]
    pub fn prepend(&mut self, n: usize) -> bool {
        if n > self.head as usize {
            return false;
        }
        self.head -= n as u32;
        self.len += n as u32;
        true
    }

    /// Removes `n` bytes from the front. Returns false if the frame is shorter.
    #[inline]
    pub fn adj(&mut self, n: usize) -> bool {
        if n > self.len as usize {
            return false;
        }
        self.head += n as u32;
        self.len -= n as u32;
        true
    }

    /// Grows the frame by `n` bytes at the end (into tailroom). Returns false
    /// if tailroom is short.
    #[inline]
    pub fn append(&mut self, n: usize) -> bool {
        if n > self.tailroom() {
            return false;
        }
        self.len += n as u32;
        true
    }

    /// Cuts the frame to `len` bytes. Returns false if it is shorter.
    #[inline]
    pub fn trim_to(&mut self, len: usize) -> bool {
        if len > self.len as usize {
            return false;
        }
        self.len = len as u32;
        true
    }
}

/// Counters a port backend keeps itself (beyond what the worker counts).
#[derive(Debug, Default, Clone, Copy)]
pub struct PortStats {
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames handed to the device for transmit.
    pub tx_packets: u64,
    /// Bytes handed to the device for transmit.
    pub tx_bytes: u64,
    /// Frames dropped because the tx ring or the UMEM had no space.
    pub tx_dropped: u64,
    /// Frames the kernel dropped on receive (rx ring full, fill ring empty).
    pub rx_dropped: u64,
}

/// Errors of port setup.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    /// Interface not found.
    #[error("interface {0:?} not found")]
    NoInterface(String),
    /// AF_XDP socket or UMEM setup failed.
    #[error("AF_XDP setup on {interface:?} queue {queue}: {what}")]
    Setup {
        /// Interface name.
        interface: String,
        /// Queue id.
        queue: u32,
        /// What failed.
        what: String,
    },
    /// Another process holds the interface's lock (secgw and
    /// secgw-pktgen share it, one AF_XDP user per interface): nothing on
    /// the interface was touched.
    #[error("interface {interface} is in use by {}", holder_text(*.pid, .holder.as_deref()))]
    Busy {
        /// Interface name.
        interface: String,
        /// The holder's pid, as its lock file names it.
        pid: Option<u32>,
        /// The holder's command name (`/proc/PID/comm`) when the error was
        /// made; `None` when the lock names no pid or that process has gone
        /// (it may be exiting).
        holder: Option<String>,
    },
    /// Any other OS error.
    #[error("{0}")]
    Os(#[from] std::io::Error),
}

/// "secgw-pktgen (pid 7)", "pid 7 (no longer running)" or "another process
/// (no pid in its lock)": who holds an interface, for [`IoError::Busy`].
fn holder_text(pid: Option<u32>, holder: Option<&str>) -> String {
    match (pid, holder) {
        (Some(p), Some(name)) => format!("{name} (pid {p})"),
        (Some(p), None) => format!("pid {p} (no longer running: it may be exiting)"),
        (None, _) => "another process (no pid in its lock)".to_owned(),
    }
}

/// What process `pid` is: its command name (`/proc/PID/comm`, at most 15
/// characters), `None` when it cannot be read (the process has gone).
pub fn process_name(pid: u32) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(comm.trim_end().to_string())
}

/// A port: bursts of frames in and out. Owned by one worker (`Send`, not
/// shared).
pub trait Port: Send {
    /// Receives up to `bufs.len()` frames, copying each into `bufs[i]`
    /// (via [`PktBuf::reset`]/[`PktBuf::set_len`]) and setting `bufs[i].port`.
    /// Returns how many were filled; never blocks.
    fn rx_burst(&mut self, bufs: &mut [PktBuf]) -> usize;

    /// Transmits the frames of `bufs` in order. Returns how many were taken;
    /// the caller counts the rest as tx drops. Never blocks.
    fn tx_burst(&mut self, bufs: &[PktBuf]) -> usize;

    /// Reclaims completed transmissions and kicks the kernel if it needs a
    /// wakeup; call once per loop iteration.
    fn poll(&mut self);

    /// Counters kept by the backend.
    fn stats(&self) -> PortStats;
}

impl AsMut<[u8]> for PktBuf {
    /// The frame bytes (crypto ops name ranges relative to the frame start).
    fn as_mut(&mut self) -> &mut [u8] {
        self.frame_mut()
    }
}
