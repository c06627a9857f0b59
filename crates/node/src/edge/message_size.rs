//! The size bound of each gRPC request message, enforced where the bytes arrive.
//!
//! tonic refuses a message over a service's decoding bound with `OUT_OF_RANGE` and no reason.
//! gRPC's convention for a message too large is `RESOURCE_EXHAUSTED`, and every refusal of this
//! node carries a `certus-error` reason, so this layer reads each message's length prefix (the
//! 5-byte header of gRPC's framing) as the request body streams in and ends the body with that
//! status before the message is buffered. tonic passes a body's `Status` error on as the call's
//! answer. The same bounds are given to tonic (`request_bytes_max`), which stays the backstop.
//!
//! Real sockets only, like the other layers in front of the services.

use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};
use tonic::Status;
use tonic::codegen::Bytes;

use crate::errors::status;
use crate::limits::{CLIENT_MESSAGE_BYTES_MAX, PIPELINE_REQUEST_BYTES_MAX, RAFT_MESSAGE_BYTES_MAX};

/// The `certus-error` reason of a request message over its service's bound.
pub const MESSAGE_TOO_LARGE: &str = "message-too-large";

/// The largest request message a service accepts, by the gRPC path's service name
/// (`/package.Service/Method` or just `package.Service`).
pub fn request_bytes_max(path: &str) -> usize {
    let service = path.trim_start_matches('/');
    let service = service
        .split_once('/')
        .map_or(service, |(service, _)| service);
    match service {
        "certus.v1.Raft" => RAFT_MESSAGE_BYTES_MAX,
        "certus.v1.Pipelines" => PIPELINE_REQUEST_BYTES_MAX,
        _ => CLIENT_MESSAGE_BYTES_MAX,
    }
}

/// The gRPC framing header: a compression flag and a 4-byte big-endian length.
const FRAME_HEADER_BYTES: usize = 5;

/// Follows gRPC's length-prefixed framing across a body's chunks.
#[derive(Debug, Clone, Default)]
pub struct FrameReader {
    header: [u8; FRAME_HEADER_BYTES],
    header_filled: usize,
    payload_left: u64,
}

impl FrameReader {
    /// Reads `chunk`; the length of the first message header in it that exceeds `bytes_max`.
    pub fn over_bound(&mut self, mut chunk: &[u8], bytes_max: usize) -> Option<u64> {
        while !chunk.is_empty() {
            if self.payload_left > 0 {
                let skipped = self.payload_left.min(chunk.len() as u64);
                self.payload_left -= skipped;
                chunk = &chunk[usize::try_from(skipped).unwrap_or(chunk.len())..];
                continue;
            }
            let taken = (FRAME_HEADER_BYTES - self.header_filled).min(chunk.len());
            self.header[self.header_filled..self.header_filled + taken]
                .copy_from_slice(&chunk[..taken]);
            self.header_filled += taken;
            chunk = &chunk[taken..];
            if self.header_filled == FRAME_HEADER_BYTES {
                self.header_filled = 0;
                let length = u64::from(u32::from_be_bytes([
                    self.header[1],
                    self.header[2],
                    self.header[3],
                    self.header[4],
                ]));
                if length > bytes_max as u64 {
                    return Some(length);
                }
                self.payload_left = length;
            }
        }
        None
    }
}

/// A request body that ends with `RESOURCE_EXHAUSTED` (`message-too-large`) at the first message
/// header over the bound.
#[derive(Debug)]
pub struct BoundedBody {
    inner: tonic::body::Body,
    frames: FrameReader,
    bytes_max: usize,
    refused: bool,
}

impl BoundedBody {
    /// `inner`, whose messages may be at most `bytes_max` bytes each.
    pub fn new(inner: tonic::body::Body, bytes_max: usize) -> BoundedBody {
        BoundedBody {
            inner,
            frames: FrameReader::default(),
            bytes_max,
            refused: false,
        }
    }
}

/// The status of a message of `length` bytes over `bytes_max`.
pub fn too_large(length: u64, bytes_max: usize) -> Status {
    status(
        tonic::Code::ResourceExhausted,
        MESSAGE_TOO_LARGE,
        format!(
            "a request message of {length} bytes exceeds this service's bound of {bytes_max} bytes"
        ),
    )
}

impl Body for BoundedBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if self.refused {
            return Poll::Ready(None);
        }
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref().cloned() {
                    let bytes_max = self.bytes_max;
                    if let Some(length) = self.frames.over_bound(&data, bytes_max) {
                        self.refused = true;
                        return Poll::Ready(Some(Err(too_large(length, bytes_max))));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(error))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.refused || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Puts [`BoundedBody`] around every request body, with its service's bound.
#[derive(Debug, Clone, Copy, Default)]
pub struct MessageSizeLayer;

impl<S> tower_layer::Layer<S> for MessageSizeLayer {
    type Service = MessageSizeService<S>;
    fn layer(&self, inner: S) -> MessageSizeService<S> {
        MessageSizeService { inner }
    }
}

/// The service [`MessageSizeLayer`] makes.
#[derive(Debug, Clone)]
pub struct MessageSizeService<S> {
    inner: S,
}

impl<S> tower_service::Service<http::Request<tonic::body::Body>> for MessageSizeService<S>
where
    S: tower_service::Service<http::Request<tonic::body::Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let bytes_max = request_bytes_max(request.uri().path());
        let request = request.map(|body| tonic::body::Body::new(BoundedBody::new(body, bytes_max)));
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(length: u32) -> Vec<u8> {
        let mut bytes = vec![0];
        bytes.extend_from_slice(&length.to_be_bytes());
        bytes.extend(std::iter::repeat_n(7, length as usize));
        bytes
    }

    #[test]
    fn messages_within_the_bound_pass_in_any_chunking() {
        let mut body = frame(10);
        body.extend(frame(0));
        body.extend(frame(100));
        for chunk_bytes in 1..=body.len() {
            let mut reader = FrameReader::default();
            for chunk in body.chunks(chunk_bytes) {
                assert_eq!(
                    reader.over_bound(chunk, 100),
                    None,
                    "chunks of {chunk_bytes}"
                );
            }
        }
    }

    #[test]
    fn the_first_message_over_the_bound_is_named_in_any_chunking() {
        let mut body = frame(10);
        body.extend(frame(101));
        for chunk_bytes in 1..=body.len() {
            let mut reader = FrameReader::default();
            let found = body
                .chunks(chunk_bytes)
                .find_map(|chunk| reader.over_bound(chunk, 100));
            assert_eq!(found, Some(101), "chunks of {chunk_bytes}");
        }
    }

    #[test]
    fn each_service_has_its_bound() {
        assert_eq!(
            request_bytes_max("/certus.v1.Raft/AppendEntries"),
            RAFT_MESSAGE_BYTES_MAX
        );
        assert_eq!(
            request_bytes_max("certus.v1.Pipelines"),
            PIPELINE_REQUEST_BYTES_MAX
        );
        assert_eq!(
            request_bytes_max("/certus.v1.Leases/Acquire"),
            CLIENT_MESSAGE_BYTES_MAX
        );
        let status = too_large(300_000, CLIENT_MESSAGE_BYTES_MAX);
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert_eq!(
            status
                .metadata()
                .get(crate::errors::ERROR_REASON_KEY)
                .unwrap(),
            MESSAGE_TOO_LARGE
        );
    }
}
