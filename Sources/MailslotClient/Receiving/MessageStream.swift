import Foundation
import Synchronization

/// The mailbox as a live sequence of messages, delivered **at least once** to the app: what
/// ``MailslotClient/messages(onState:)`` returns.
///
/// The rule: **a message is handled when the loop asks for the next one.** Each message the
/// sequence yields stays "not handled" in the client's store while the loop body runs; when the
/// loop comes back for the next element, the previous one is marked handled. A message whose
/// handling did not finish — the app crashed, was killed, or left the loop with `break`, `return`
/// or a thrown error — is yielded again: by this sequence's next iteration, or by the first
/// `messages()` after a restart, before anything new. So do the work a message needs *inside*
/// the loop body, and make it safe to do twice (a crash after the work but before the next
/// `next()` repeats it).
///
/// ```swift
/// for try await message in client.messages() {
///     try await handle(message)   // crash here: `message` comes again after the restart
/// }                               // back at the top: `message` is handled
/// ```
///
/// The relay is told to erase each message as soon as it is stored on this device (the store is
/// durable), not when the app handled it: the store, not the relay, keeps what is not handled.
///
/// Back-pressure: the sequence keeps at most one page of messages in memory; the rest waits in
/// the store. When ``MailslotClient/maxUnhandled`` stored messages wait to be handled, the client
/// stops reading from the relay until the app catches up (the relay then holds the rest, up to
/// its delivery window, spec/protocol.md §8.2). Typing indicators are never stored: they are
/// yielded once, the newest few kept when the app is slow (older ones are dropped), and need no
/// handling.
///
/// One sequence per client at a time: two would yield the same stored messages (and the relay
/// keeps one subscription per mailbox: the newer replaces the older, which ends with
/// ``MailslotClient/StreamEnd/replaced``). Iterating ends when the task is cancelled or the loop
/// is left; the connection is closed then.
public struct MessageStream: AsyncSequence, Sendable {
    /// Each element is a message opened, verified and stored (or a typing indicator).
    public typealias Element = ReceivedMessage

    let client: MailslotClient
    let onState: @Sendable (MailslotClient.ConnectionState) -> Void

    /// Starts the subscription: the first iterator connects to the relay.
    public func makeAsyncIterator() -> AsyncIterator {
        let signal = StreamSignal()
        let client = client, onState = onState
        let producer = Task { await client.receiveLoop(signal, onState: onState) }
        return AsyncIterator(feed: StreamFeed(client: client, signal: signal, producer: producer))
    }

    /// Yields stored messages not handled yet, then new ones as they arrive; marks the previous
    /// one handled each time it is asked for the next (see ``MessageStream``).
    public struct AsyncIterator: AsyncIteratorProtocol, Sendable {
        let feed: StreamFeed

        /// The next message: first the one before it is marked handled. Nil when the task is
        /// cancelled or the subscription ended without an error.
        /// - Throws: ``MailslotClient/StreamEnd`` when the relay ended the subscription for good;
        ///   a store failure when marking or reading messages failed.
        public mutating func next() async throws -> ReceivedMessage? {
            try await feed.next()
        }

        /// Whether the receive loop behind this iterator has stopped reading from the relay
        /// because ``MailslotClient/maxUnhandled`` stored messages wait for the app
        /// (back-pressure): it reads on once a message is handled. The relay holds the rest
        /// meanwhile. A state to observe (tests, diagnostics), not to wait on in a loop.
        package var isWaitingForRoom: Bool { feed.signal.isWaitingForRoom }

        /// Whether a ``next()`` is waiting for a message: nothing stored is left to yield, and it
        /// wakes when one is stored, a typing indicator comes or the subscription ends.
        package var isWaitingForMessages: Bool { feed.signal.isWaitingForNews }
    }
}

/// What the receive loop tells the stream: a message was stored, a typing indicator came, the
/// subscription ended; and what the stream tells the loop: a message was handled (room for more).
final class StreamSignal: Sendable {
    /// The newest typing indicators kept while the app is slow.
    static let maxEphemeral = 16

    private struct State {
        var stored = false
        var ephemeral: [ReceivedMessage] = []
        var end: Result<Void, any Error>?
        var consumer: CheckedContinuation<Void, Never>?
        var handled = false
        var producer: CheckedContinuation<Void, Never>?
    }
    private let state = Mutex(State())

    /// A message was stored: a waiting consumer looks at the store again.
    func stored() {
        state.withLock { state in
            state.stored = true
            return state.consumer.take()
        }?.resume()
    }

    /// A message shown but never stored (a typing indicator).
    func ephemeral(_ message: ReceivedMessage) {
        state.withLock { state in
            state.ephemeral.append(message)
            if state.ephemeral.count > Self.maxEphemeral { state.ephemeral.removeFirst() }
            return state.consumer.take()
        }?.resume()
    }

    /// The receive loop ended: with an error, or without one (cancelled).
    func finish(_ end: Result<Void, any Error>) {
        state.withLock { state in
            if state.end == nil { state.end = end }
            return state.consumer.take()
        }?.resume()
    }

    /// The next typing indicator waiting, if any.
    func takeEphemeral() -> ReceivedMessage? {
        state.withLock { $0.ephemeral.isEmpty ? nil : $0.ephemeral.removeFirst() }
    }

    /// How the receive loop ended, once it has.
    var end: Result<Void, any Error>? { state.withLock { $0.end } }

    /// Whether the consumer is suspended in ``waitForNews()``.
    var isWaitingForNews: Bool { state.withLock { $0.consumer != nil } }

    /// Whether the receive loop is suspended in ``waitForRoom()``: it reads nothing from the
    /// relay until ``handled()``.
    var isWaitingForRoom: Bool { state.withLock { $0.producer != nil } }

    /// Waits until something is stored, shown or ends, or the task is cancelled; returns at once
    /// if something was stored since the last wait.
    func waitForNews() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let ready = state.withLock { state -> Bool in
                    if state.stored || !state.ephemeral.isEmpty || state.end != nil || Task.isCancelled {
                        state.stored = false
                        return true
                    }
                    state.consumer = continuation
                    return false
                }
                if ready { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.consumer.take() }?.resume()
        }
        state.withLock { $0.stored = false }
    }

    /// The app handled a message: a receive loop waiting for room reads on.
    func handled() {
        state.withLock { state in
            state.handled = true
            return state.producer.take()
        }?.resume()
    }

    /// Waits until the app handled a message (or the task is cancelled).
    func waitForRoom() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let ready = state.withLock { state -> Bool in
                    if state.handled || Task.isCancelled {
                        state.handled = false
                        return true
                    }
                    state.producer = continuation
                    return false
                }
                if ready { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.producer.take() }?.resume()
        }
        state.withLock { $0.handled = false }
    }
}

/// The consumer's side of one ``MessageStream`` iteration: the page read from the store, the
/// message yielded and not yet handled. Dropping it (the loop left, the task ended) closes the
/// subscription.
final class StreamFeed: Sendable {
    /// The most stored messages read into memory at once.
    static let pageSize = 32

    private struct State {
        var page: [ReceivedMessage] = []
        var current: String?
    }
    private let state = Mutex(State())
    let client: MailslotClient
    let signal: StreamSignal
    let producer: Task<Void, Never>

    init(client: MailslotClient, signal: StreamSignal, producer: Task<Void, Never>) {
        self.client = client
        self.signal = signal
        self.producer = producer
    }

    deinit { producer.cancel() }

    func next() async throws -> ReceivedMessage? {
        // Asked for the next one: the previous one is handled.
        if let handled = state.withLock({ $0.current.take() }) {
            try await client.store.markHandled([handled])
            signal.handled()
        }
        while !Task.isCancelled {
            if let message = state.withLock({ $0.page.isEmpty ? nil : $0.page.removeFirst() }) {
                state.withLock { $0.current = message.id }
                // Its files are saved (as the policy says) before it is shown, so that it comes with their paths.
                return await client.withAttachments(message)
            }
            let page = try await client.store.unhandled(limit: Self.pageSize)
            if !page.isEmpty {
                state.withLock { $0.page = page }
                continue
            }
            if let typing = signal.takeEphemeral() { return typing }
            if let end = signal.end {
                try end.get()
                return nil
            }
            await signal.waitForNews()
        }
        return nil
    }
}
