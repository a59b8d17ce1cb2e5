import MailslotCrypto
import NIOCore
#if canImport(Glibc)
import Glibc
#endif

/// One part's body on its way to a file: the request's task only collects the body's buffers,
/// and the ``BlobIOPool`` hashes (BLAKE2b-256) and writes them (issue 27: the bytes of a large
/// transfer must not hold the threads ordinary messages run on).
///
/// The body is taken in chunks of about ``chunkBytes``: the buffers as the HTTP decoder handed
/// them over, not copied. A chunk goes to the pool, which hashes its buffers in order and writes
/// them with `pwritev` at their offset, while the task collects the next one; the next chunk
/// goes only once the previous is written, so the hash sees the bytes in order and one transfer
/// has one job on the pool at a time. Memory per transfer: two chunks (the one written, the one
/// collected), about 1 MiB whatever the part or file size; a slow disk slows the body's reading
/// through the body sequence's back-pressure, never grows a queue.
struct PartStream {
    /// A chunk: the most bytes collected before they go to the pool. Half a MiB, so that the two
    /// a transfer holds weigh what the one 1 MiB copy buffer did before (docs/performance.md:
    /// RSS growth with 16 concurrent uploads is bounded by issue 27).
    static let chunkBytes = 512 << 10

    /// The most buffers one `pwritev` takes (IOV_MAX is 1024 on Linux; a chunk of 64 KiB
    /// socket reads has 16).
    static let vectorsPerWrite = 64

    let pool: BlobIOPool
    let chunkBytes: Int
    /// Called each time the stream stops taking the body to wait for the pool to finish the
    /// previous chunk: the back-pressure, observable (tests see the stream stop without a timer).
    let waitsForPool: @Sendable () -> Void

    init(pool: BlobIOPool, chunkBytes: Int = Self.chunkBytes, waitsForPool: @escaping @Sendable () -> Void = {}) {
        precondition(chunkBytes > 0)
        self.pool = pool
        self.chunkBytes = chunkBytes
        self.waitsForPool = waitsForPool
    }

    /// Writes exactly `length` bytes of `body` to `descriptor` from `offset` and returns their
    /// BLAKE2b-256 digest. Throws ``BlobStorageFailure/shortBody`` for a body that ends early or
    /// fails (the client went away), ``BlobStorageFailure/failed(_:)`` for a longer one, and the
    /// write's failure (``BlobStorageFailure/full``, …). However it ends, no write of it is still
    /// running on `descriptor` when it returns, so the caller may close it.
    func write<Body: AsyncSequence & Sendable>(_ body: Body, length: Int64, to descriptor: CInt, at offset: Int64) async throws(BlobStorageFailure) -> [UInt8]
    where Body.Element == ByteBuffer {
        let hasher = PartHasher()
        var chunk: [ByteBuffer] = []
        var chunkSize = 0
        var received: Int64 = 0
        var submitted: Int64 = 0
        var inFlight: Task<Void, any Error>?
        do {
            for try await buffer in body {
                received += Int64(buffer.readableBytes)
                // Content-Length is checked before the body is read, so the HTTP decoder delivers
                // no more than the part's length; this keeps the bound for any other caller.
                guard received <= length else { throw BlobStorageFailure.failed("the body is longer than the part") }
                guard buffer.readableBytes > 0 else { continue }
                chunk.append(buffer)
                chunkSize += buffer.readableBytes
                if chunkSize >= chunkBytes {
                    if let inFlight {
                        waitsForPool()
                        try await inFlight.value
                    }
                    inFlight = submit(chunk, hasher: hasher, descriptor: descriptor, at: offset + submitted)
                    submitted += Int64(chunkSize)
                    chunk = []
                    chunkSize = 0
                }
            }
            try await inFlight?.value
            inFlight = nil
            guard received == length else { throw BlobStorageFailure.shortBody }
            if !chunk.isEmpty {
                try await submit(chunk, hasher: hasher, descriptor: descriptor, at: offset + submitted).value
            }
        } catch {
            // Never leave a write behind on a descriptor the caller is about to close.
            _ = await inFlight?.result
            if let failure = error as? BlobStorageFailure { throw failure }
            // The connection ended mid-body (closed, reset, timed out).
            throw .shortBody
        }
        return hasher.finalize()
    }

    /// Hashes and writes `chunk` at `offset` on the pool.
    private func submit(_ chunk: [ByteBuffer], hasher: PartHasher, descriptor: CInt, at offset: Int64) -> Task<Void, any Error> {
        let pool = self.pool
        return Task {
            do {
                try await pool.run {
                    for buffer in chunk { buffer.withUnsafeReadableBytes { hasher.update($0) } }
                    try Self.write(chunk, to: descriptor, at: offset)
                }
            } catch let failure as BlobStorageFailure {
                throw failure
            } catch {
                // The pool is shutting down (the relay is stopping).
                throw BlobStorageFailure.failed("\(type(of: error))")
            }
        }
    }

    /// Writes all of `buffers` at `offset` with `pwritev`, ``vectorsPerWrite`` buffers a call,
    /// going on after a short write. Blocking: for a pool thread.
    static func write(_ buffers: [ByteBuffer], to descriptor: CInt, at offset: Int64) throws(BlobStorageFailure) {
        var rest = buffers.filter { $0.readableBytes > 0 }[...]
        var position = offset
        while !rest.isEmpty {
            let group = rest.prefix(vectorsPerWrite)
            var vectors: [iovec] = []
            vectors.reserveCapacity(group.count)
            let count = withVectors(group, &vectors) { vectors in
                var count: Int
                repeat {
                    count = pwritev(descriptor, vectors, CInt(vectors.count), off_t(position))
                } while count < 0 && errno == EINTR
                return count
            }
            if count < 0 {
                if errno == ENOSPC || errno == EDQUOT { throw .full }
                throw .failed("pwritev: errno \(errno)")
            }
            position += Int64(count)
            // Drop what was written, whole buffers first, then the front of a partly written one.
            var left = count
            while left > 0, let first = rest.first {
                if left >= first.readableBytes {
                    left -= first.readableBytes
                    rest.removeFirst()
                } else {
                    rest[rest.startIndex].moveReaderIndex(forwardBy: left)
                    left = 0
                }
            }
        }
    }

    /// Calls `body` with an `iovec` for each of `buffers`, valid for the call only: each buffer's
    /// bytes are borrowed in turn, nested, so that every pointer lives inside its buffer's scope.
    private static func withVectors<R>(_ buffers: ArraySlice<ByteBuffer>, _ vectors: inout [iovec], _ body: ([iovec]) -> R) -> R {
        guard let first = buffers.first else { return body(vectors) }
        return first.withUnsafeReadableBytes { bytes in
            vectors.append(iovec(iov_base: UnsafeMutableRawPointer(mutating: bytes.baseAddress), iov_len: bytes.count))
            return withVectors(buffers.dropFirst(), &vectors, body)
        }
    }
}

/// A part's running digest, handed from one pool job to the next. Not locked: ``PartStream``
/// submits a chunk only after the previous chunk's job has finished (it awaits it), so exactly
/// one thread uses it at a time, and each job starts after the last one ended.
private final class PartHasher: @unchecked Sendable {
    private let hasher = BLAKE2bHasher(length: 32)

    func update(_ bytes: UnsafeRawBufferPointer) { hasher.update(bytes) }

    func finalize() -> [UInt8] { hasher.finalize() }
}
