/// The answer to an operation the service started (``MailboxService``): everything that could be
/// decided at once was, and a write is already queued; awaiting ``value`` waits for its commit.
/// Each operation has one entry point that returns one of these: an HTTP route awaits it at
/// once, a subscription socket queues it (``AnswerQueue``) and writes it in frame order.
struct Pending<T: Sendable>: Sendable {
    private let answer: @Sendable () async throws -> T

    /// The answer `answer` produces once the work it waits for is done.
    init(_ answer: @escaping @Sendable () async throws -> T) {
        self.answer = answer
    }

    /// The operation's result, once committed; its refusal or failure otherwise.
    var value: T {
        get async throws { try await answer() }
    }
}
