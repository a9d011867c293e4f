//! The server's gRPC codec: prost, with small per-call buffers.
//!
//! tonic's default codec gives every call an 8 KiB encode buffer for its whole life. A Watch
//! stream lives as long as its agent and sends a few hundred bytes per publication, so at
//! 10 000 streams the default buffers alone would hold about 80 MiB. These buffers start at
//! [`ENCODE_BUFFER`] / [`DECODE_BUFFER`] bytes and grow only for a message that needs more
//! (`BytesMut` reserves), so a large update or report still goes through.

use std::marker::PhantomData;

use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstDecoder, ProstEncoder};

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
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(BufferSettings::new(ENCODE_BUFFER, YIELD_THRESHOLD))
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::new(BufferSettings::new(DECODE_BUFFER, YIELD_THRESHOLD))
    }
}
