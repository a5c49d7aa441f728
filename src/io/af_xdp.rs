//! TEMPORARY STUB until the AF_XDP backend lands (being written).
#![allow(missing_docs)]
use super::{IoError, PktBuf, Port, PortStats};
#[derive(Debug, Clone, Copy)]
pub enum AttachMode { Skb, Native, Auto }
pub struct AfXdpConfig { pub interface: String, pub queue: u32, pub mode: AttachMode, pub frame_count: u32, pub ring_size: u32, pub frame_size: u32 }
impl AfXdpConfig { pub fn new(interface: String, queue: u32) -> Self { AfXdpConfig { interface, queue, mode: AttachMode::Skb, frame_count: 4096, ring_size: 2048, frame_size: 4096 } } }
pub struct AfXdpPort;
impl AfXdpPort { pub fn open(_id: u16, cfg: &AfXdpConfig) -> Result<AfXdpPort, IoError> { Err(IoError::NoInterface(cfg.interface.clone())) } }
impl Port for AfXdpPort { fn rx_burst(&mut self, _: &mut [PktBuf]) -> usize { 0 } fn tx_burst(&mut self, _: &[PktBuf]) -> usize { 0 } fn poll(&mut self) {} fn stats(&self) -> PortStats { PortStats::default() } }
pub fn interface_mac(name: &str) -> Result<[u8; 6], IoError> { Err(IoError::NoInterface(name.into())) }
