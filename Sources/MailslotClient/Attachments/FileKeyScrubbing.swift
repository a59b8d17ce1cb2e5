import Foundation
import MailslotWire

// File keys leave the stored bodies once the files are done with (spec/attachments.md §6.4): a
// copy of the client's database taken later (a stolen device, a backup) then opens no blob that
// a recorded download or a relay that kept the bytes might still hold. The stored message keeps
// what the app shows — the file's name, media type, size and preview — with a key of zeros.
extension MailslotClient {
    /// How many sent file messages one flush asks the relay about.
    static let sentFileKeyChecks = 16

    /// Scrubs the keys of received message `messageID`'s files that are saved and acknowledged,
    /// or gone from the relay, then empties the WAL so that no older copy of the body stays in
    /// it. Best effort: tried again at the next download or flush.
    func scrubReceivedFileKeys(of messageID: String) async {
        do {
            if try await store.scrubReceivedFileKeys(messageID) { await eraseOldCopies() }
        } catch {
            logger.info("could not scrub the file keys of a stored message", metadata: ["id": "\(messageID)", "error": "\(Self.describe(error))"])
        }
    }

    /// Asks the relay about the blobs of sent file messages whose stored bodies still hold keys
    /// (at most ``sentFileKeyChecks`` messages, oldest first): a blob its author gets `404` for is
    /// erased — every recipient acknowledged it, it expired, or it was deleted — and its key is
    /// scrubbed from the body. Best effort, called by `flush`.
    func scrubSentFileKeys() async {
        guard let pending = try? await store.sentFileKeys(limit: Self.sentFileKeyChecks), !pending.isEmpty else { return }
        var changed = false
        for (id, blobs) in pending {
            var erased: Set<String> = []
            for blob in blobs {
                do {
                    _ = try await authorized { try await api.blob(blob, session: $0) }
                } catch ClientError.relay(let problem) where problem.code == .notFound {
                    erased.insert(blob)
                } catch {
                    continue  // not now: asked again at the next flush
                }
            }
            if !erased.isEmpty, (try? await store.scrubSentFileKeys(id, blobs: erased)) == true { changed = true }
        }
        if changed { await eraseOldCopies() }
    }
}
