import NIOCore
import Synchronization

/// The answers a socket owes, in the order its frames arrived. The socket's reader starts each
/// frame's work at once (a send or an ack joins the next group commit) and queues the answer; a
/// writer takes the answers in turn and writes them. So one client's frames share commits
/// instead of each waiting for the one before it, and its answers still come in order.
///
/// The writer runs only while answers are queued (an idle socket holds no task): the append that
/// finds none running says so, and the writer retires when it finds the queue empty.
///
/// Bounded by count and by the size of the frames behind the answers (a queued send holds its
/// envelope until it commits): a reader that finds it full waits, which stops it reading the
/// socket, and TCP pushes back on the client. A frame larger than the byte bound still goes
/// through when the queue is empty.
final class AnswerQueue: Sendable {
    /// Produces the frame text to write once the frame's work is done; throwing ends the socket.
    typealias Answer = @Sendable () async throws -> String

    private struct State {
        /// A ring buffer: a busy socket's queue may never run empty, and taking from the front
        /// must neither shift the rest nor keep what was taken (the envelopes they hold).
        /// Small at first: most sockets are idle most of the time, and it grows (to a small
        /// multiple of `maxCount`) for a busy one.
        var answers = CircularBuffer<(answer: Answer, bytes: Int)>(initialCapacity: 1)
        var bytes = 0
        var closed = false
        var waitingForRoom: CheckedContinuation<Void, Never>?
        /// A writer takes answers with ``takeOrRetire()``.
        var writerActive = false

        /// Whether an answer for a frame of `bytes` fits now (always, when the queue is empty).
        func hasRoom(for bytes: Int, maxCount: Int, maxBytes: Int) -> Bool {
            answers.isEmpty || (answers.count < maxCount && self.bytes + bytes <= maxBytes)
        }
    }

    private let maxCount: Int
    private let maxBytes: Int
    private let state = Mutex(State())

    /// A queue of at most `maxCount` answers, for frames of at most `maxBytes` in all.
    init(maxCount: Int, maxBytes: Int) {
        self.maxCount = maxCount
        self.maxBytes = maxBytes
    }

    /// Queues the answer to a frame of `bytes` bytes, waiting for room first: true when the
    /// caller must start the writer (it takes answers with ``takeOrRetire()`` until none is
    /// left), false when one runs already, nil once the queue is closed (the answer will not be
    /// written).
    func append(_ answer: @escaping Answer, bytes: Int) async -> Bool? {
        while true {
            enum Step { case queued(startWriter: Bool), closed, full }
            let step = state.withLock { state -> Step in
                if state.closed { return .closed }
                guard state.hasRoom(for: bytes, maxCount: maxCount, maxBytes: maxBytes) else { return .full }
                state.answers.append((answer, bytes))
                state.bytes += bytes
                guard !state.writerActive else { return .queued(startWriter: false) }
                state.writerActive = true
                return .queued(startWriter: true)
            }
            switch step {
            case .queued(let startWriter): return startWriter
            case .closed: return nil
            case .full:
                await withCheckedContinuation { continuation in
                    let now = state.withLock { state -> Bool in
                        if state.closed || state.hasRoom(for: bytes, maxCount: maxCount, maxBytes: maxBytes) { return true }
                        state.waitingForRoom = continuation
                        return false
                    }
                    if now { continuation.resume() }
                }
            }
        }
    }

    /// The oldest answer without waiting; when none is queued the writer retires (the next
    /// ``append(_:bytes:)`` starts another). Queued answers are taken after a close too.
    func takeOrRetire() -> Answer? {
        let (answer, reader) = state.withLock { state -> (Answer?, CheckedContinuation<Void, Never>?) in
            guard !state.answers.isEmpty else {
                state.writerActive = false
                return (nil, nil)
            }
            let first = state.answers.removeFirst()
            state.bytes -= first.bytes
            defer { state.waitingForRoom = nil }
            return (first.answer, state.waitingForRoom)
        }
        reader?.resume()
        return answer
    }

    /// Closes the queue to new answers; true when a writer still takes the queued ones (it sees
    /// ``takeOrRetire()`` return nil once they are written), false when none is left to write.
    func closeWhileWriting() -> Bool {
        let (writing, reader) = state.withLock { state in
            state.closed = true
            defer { state.waitingForRoom = nil }
            return (state.writerActive || !state.answers.isEmpty, state.waitingForRoom)
        }
        reader?.resume()
        return writing
    }

    /// How many slots the queue's storage holds, taken answers included: stays within a small
    /// multiple of `maxCount` however long the socket stays busy.
    var storageCount: Int { state.withLock { $0.answers.capacity } }

    /// Whether a reader waits for room (``append(_:bytes:)`` suspended): what tests await instead
    /// of guessing how long a reader takes to get there.
    var isReaderWaiting: Bool { state.withLock { $0.waitingForRoom != nil } }

    /// No more answers: a reader waiting for room is told so. What is queued can still be taken.
    func close() { _ = closeWhileWriting() }
}
