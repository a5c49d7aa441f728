//! Any bytes as a control socket request line: the parser must never panic;
//! an accepted request must serialize back to a line that parses to the
//! same request, and its responses must be one line each.
#![no_main]
use libfuzzer_sys::fuzz_target;
use secgw::control::protocol::{self, CtlError, ErrorCode};

fuzz_target!(|data: &[u8]| {
    match protocol::parse_request(data) {
        Ok(req) => {
            let line = protocol::request_line(req.id.as_ref(), &req.command);
            let again = protocol::parse_request(line.trim_end_matches('\n').as_bytes()).expect("a request we print parses");
            assert_eq!(again, req);
            let ok = protocol::ok_line(req.id.as_ref(), req.id.clone().unwrap_or_default());
            assert_eq!(ok.matches('\n').count(), 1);
        }
        Err(e) => {
            let line = protocol::error_line(e.id.as_ref(), &e.error);
            assert_eq!(line.matches('\n').count(), 1);
            assert!(protocol::parse_server_line(line.trim_end().as_bytes()).is_ok());
            let _ = CtlError::new(ErrorCode::Internal, e.error.to_string());
        }
    }
});
