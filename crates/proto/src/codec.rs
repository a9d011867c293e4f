//! The server's gRPC codec: prost, with small per-call buffers.
//!
//! tonic's default codec gives every call an 8 KiB encode buffer for its whole life. A Watch
//! stream lives as long as its agent and sends a few hundred bytes per publication, so at
//! 10 000 streams the default buffers alone would hold about 80 MiB. These buffers start at
//! [`ENCODE_BUFFER`] / [`DECODE_BUFFER`] bytes and grow only for a message that needs more
//! (`BytesMut` reserves), so a large update or report still goes through.
//!
//! A request is checked on its bytes before it is decoded ([`WireBounds`]): decoding can
//! make many times more of a message than its size.

use std::marker::PhantomData;

use prost::bytes::Buf as _;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::Status;
use tonic_prost::ProstEncoder;

use crate::bounds::WireBounds;

/// Initial encode buffer of a call: one typical `BudgetUpdate` (a few chains) fits.
pub const ENCODE_BUFFER: usize = 1024;
/// Initial decode buffer of a call: Watch, Ack and most Report requests fit.
pub const DECODE_BUFFER: usize = 1024;
/// Encoded bytes gathered before they are handed to the transport (tonic's default).
const YIELD_THRESHOLD: usize = 32 * 1024;

/// `application/grpc+proto` through prost, with [`ENCODE_BUFFER`]-sized buffers.
#[derive(Debug, Clone, Copy)]
pub struct SmallBufferCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for SmallBufferCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for SmallBufferCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + WireBounds + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = CheckedDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(BufferSettings::new(ENCODE_BUFFER, YIELD_THRESHOLD))
    }

    fn decoder(&mut self) -> Self::Decoder {
        CheckedDecoder(PhantomData)
    }
}

/// prost's decoding of `U`, after [`WireBounds::check_wire`] has passed on the message's
/// bytes. Either failing is the caller's: `INVALID_ARGUMENT` with the reason (tonic's own
/// decoder answers bytes that are not a `U` `INTERNAL`, which reads as the server's fault).
#[derive(Debug)]
pub struct CheckedDecoder<U>(PhantomData<U>);

impl<U: prost::Message + Default + WireBounds> Decoder for CheckedDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        // The message is one contiguous buffer: this takes it without copying.
        let bytes = src.copy_to_bytes(src.remaining());
        U::check_wire(&bytes).map_err(Status::invalid_argument)?;
        U::decode(bytes).map(Some).map_err(|e| {
            Status::invalid_argument(format!("the request is not a valid protobuf message: {e}"))
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::new(DECODE_BUFFER, YIELD_THRESHOLD)
    }
}

/// A gRPC length-prefixed message: flag 0 (not compressed), its length (4 bytes, big-endian),
/// its protobuf encoding.
pub fn frame<M: prost::Message>(message: &M) -> prost::bytes::Bytes {
    let len = message.encoded_len();
    let mut buf = prost::bytes::BytesMut::with_capacity(5 + len);
    buf.extend_from_slice(&[0]);
    buf.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
    // Cannot fail: the buffer has room for the whole message.
    let _ = message.encode(&mut buf);
    buf.freeze()
}

/// Why a request body is not one gRPC message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnframeError {
    #[error("the request is not a gRPC message (truncated)")]
    Truncated,
    #[error("compressed gRPC messages are not supported")]
    Compressed,
    #[error("the request holds more than one gRPC message")]
    Trailing,
    #[error("the gRPC message is not a valid {0}: {1}")]
    Decode(&'static str, String),
}

/// The one message of a unary request `body` (whole, as received).
pub fn unframe<M: prost::Message + Default>(
    body: &[u8],
    name: &'static str,
) -> Result<M, UnframeError> {
    let (head, rest) = body.split_at_checked(5).ok_or(UnframeError::Truncated)?;
    if head[0] != 0 {
        return Err(UnframeError::Compressed);
    }
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    match rest.len().cmp(&len) {
        std::cmp::Ordering::Less => return Err(UnframeError::Truncated),
        std::cmp::Ordering::Greater => return Err(UnframeError::Trailing),
        std::cmp::Ordering::Equal => {}
    }
    M::decode(rest).map_err(|e| UnframeError::Decode(name, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{BudgetUpdate, WatchRequest};

    #[test]
    fn frames_round_trip_and_bad_bodies_are_named() {
        let req = WatchRequest {
            agent_id: "a-1".into(),
            ..Default::default()
        };
        let body = frame(&req);
        assert_eq!(unframe::<WatchRequest>(&body, "WatchRequest"), Ok(req));
        let update = frame(&BudgetUpdate {
            revision: 7,
            chains: vec![prost::bytes::Bytes::from_static(b"\x0a\x01x")],
        });
        assert_eq!(&update[..5], &[0, 0, 0, 0, 7]);
        assert_eq!(
            unframe::<WatchRequest>(&body[..4], "WatchRequest"),
            Err(UnframeError::Truncated)
        );
        assert_eq!(
            unframe::<WatchRequest>(&body[..body.len() - 1], "WatchRequest"),
            Err(UnframeError::Truncated)
        );
        let mut two = body.to_vec();
        two.extend_from_slice(&body);
        assert_eq!(
            unframe::<WatchRequest>(&two, "WatchRequest"),
            Err(UnframeError::Trailing)
        );
        let mut zipped = body.to_vec();
        zipped[0] = 1;
        assert_eq!(
            unframe::<WatchRequest>(&zipped, "WatchRequest"),
            Err(UnframeError::Compressed)
        );
        let garbage = [0, 0, 0, 0, 2, 0xff, 0xff];
        assert!(matches!(
            unframe::<WatchRequest>(&garbage, "WatchRequest"),
            Err(UnframeError::Decode("WatchRequest", _))
        ));
    }
}
