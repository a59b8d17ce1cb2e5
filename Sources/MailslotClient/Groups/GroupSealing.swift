import Foundation
import MailslotWire

/// Sealing a group message's copies on several threads (docs/design/groups.md §7.4: 1,000 copies
/// in at most 100 ms). Each copy is sealed in its own pairwise ratchet, so the copies are
/// independent: they are split into runs, each run sealed on a thread of its own (``FileWork``,
/// never Swift's cooperative pool, which a CPU-bound loop of this size would stall), as many
/// threads as cores (at most ``maxThreads``) and no thread for fewer than ``copiesPerThread``.
/// Nothing here is stored: the caller stores each advanced ratchet with its envelope in one
/// transaction, and only if the ratchet did not change since it was read.
enum GroupSealing {
    /// One member's copy to seal: its contact and its active ratchet's stored state, as read.
    struct Input: Sendable {
        let contact: Contact
        let state: Data
    }

    /// One sealed copy: the envelope, the ratchet advanced past it, and the state it was sealed
    /// from (the caller compares it with the stored one before storing).
    struct Output: Sendable {
        let contact: Contact
        let envelope: [UInt8]
        let ratchet: Ratchet
        let readState: Data
    }

    /// The most sealing threads of one send.
    static let maxThreads = 8
    /// The fewest copies worth a thread of their own.
    static let copiesPerThread = 32

    /// Seals `body` under `id` from `me` for every input whose ratchet can send; the others are
    /// left out (the caller seals or defers them). Order is not kept.
    static func seal(body: [UInt8], id: String, from me: Identity, _ inputs: [Input]) async throws -> [Output] {
        guard !inputs.isEmpty else { return [] }
        let cores = max(1, ProcessInfo.processInfo.activeProcessorCount)
        let threads = max(1, min(cores, maxThreads, inputs.count / copiesPerThread))
        let runLength = (inputs.count + threads - 1) / threads
        let runs = stride(from: 0, to: inputs.count, by: runLength).map { Array(inputs[$0..<min(inputs.count, $0 + runLength)]) }
        return try await withThrowingTaskGroup(of: [Output].self) { group in
            for run in runs {
                group.addTask { try await FileWork.run { try sealRun(body: body, id: id, from: me, run) } }
            }
            var all: [Output] = []
            all.reserveCapacity(inputs.count)
            for try await sealed in group { all += sealed }
            return all
        }
    }

    /// Seals one run, on the calling thread.
    private static func sealRun(body: [UInt8], id: String, from me: Identity, _ run: [Input]) throws -> [Output] {
        var sealed: [Output] = []
        sealed.reserveCapacity(run.count)
        for input in run {
            guard var ratchet = ClientStore.ratchet(input.state), ratchet.canSend else { continue }
            let envelope = try Envelope.seal(body: body, id: id, from: me.uid, identity: me.signing, to: input.contact.uid,
                                             mailboxKey: input.contact.mailboxKey, ratchet: &ratchet)
            sealed.append(Output(contact: input.contact, envelope: envelope, ratchet: ratchet, readState: input.state))
        }
        return sealed
    }
}
