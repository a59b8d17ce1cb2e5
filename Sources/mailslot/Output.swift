import ArgumentParser
import Foundation
import MailslotClient
import MailslotWire

/// A failure with a message for people and a documented exit code.
enum CLIError: Error, CustomStringConvertible {
    case usage(String)
    case notLoggedIn(String)
    case refused(String)
    case unavailable(String)
    case queued(String)
    case failed(String)

    var description: String {
        switch self {
        case .usage(let text), .notLoggedIn(let text), .refused(let text), .unavailable(let text), .queued(let text), .failed(let text): text
        }
    }

    var exitCode: ExitCode {
        switch self {
        case .usage: ExitCode(64)
        case .notLoggedIn: ExitCode(77)
        case .refused: ExitCode(65)
        case .unavailable: ExitCode(69)
        case .queued: ExitCode(75)
        case .failed: ExitCode(1)
        }
    }

    /// The CLI's reading of a client error.
    init(_ error: any Error) {
        switch error {
        case let error as CLIError: self = error
        case ClientError.relay(let problem) where problem.code.status == 401:
            self = .notLoggedIn("the relay refused the session (\(problem.code.rawValue)): run `mailslot login` with a new token")
        case ClientError.relay(let problem) where problem.code == .blobTooLarge:
            self = .refused("the file is larger than the relay takes (blob_too_large)\(problem.detail.map { " — \($0)" } ?? ""); nothing was sent")
        case ClientError.relay(let problem): self = .unavailable("the relay refused: \(problem.code.rawValue)\(problem.detail.map { " — \($0)" } ?? "")")
        case ClientError.unreachable(let why): self = .unavailable("the relay cannot be reached: \(why)")
        case ClientError.invalidResponse(let why): self = .unavailable("the relay answered something unexpected: \(why)")
        case ClientError.notSignedIn: self = .notLoggedIn("not logged in: run `mailslot login --relay URL --token TOKEN`")
        case ClientError.noKeys(let uid): self = .refused("\(uid) has published no keys yet (they must log in once)")
        case ClientError.invalidKeys(let uid, let code): self = .refused("the keys the relay serves for \(uid) are invalid (\(code))")
        case ClientError.keyChanged(let uid):
            self = .refused("""
                \(uid)'s identity key changed (or a safety-number comparison with \(uid) did not match). Compare the safety \
                number `mailslot fingerprint \(uid)` shows (the NEW one after a change) with them, then `mailslot trust \(uid) \
                --safety-number DIGITS`
                """)
        case ClientError.invalidSafetyNumber:
            self = .usage("a safety number is 60 digits, as `mailslot fingerprint UID` prints it (spaces and line breaks are ignored)")
        case ClientError.safetyNumberMismatch(let uid):
            self = .refused("""
                that is not the safety number of the keys `trust` would install for \(uid): nothing was trusted. Run `mailslot fingerprint \(uid)` \
                again and compare it with \(uid); if it differs from what \(uid) reads out, someone may be substituting keys: do not trust them
                """)
        case ClientError.cannotSeal(let code): self = .refused("the message cannot be sealed (\(code))")
        case ClientError.unknownGroup(let id): self = .usage("this profile knows no group \(id) (`mailslot group list --all`)")
        case ClientError.notGroupMember(let id): self = .refused("you are not a member of group \(id) (removed, or left): nothing was sent")
        case ClientError.notGroupAdmin(let id): self = .refused("only an admin of group \(id) changes it: you are not one (`mailslot group show \(id)`)")
        case ClientError.groupChangeNotAllowed(let reason): self = .refused("the group's rules refuse this change: \(reason); nothing was changed")
        case ClientError.groupTooLarge: self = .refused("the group would be too large (over 1,000 members, or 48 KiB of state with long uids); nothing was changed")
        case ClientError.invalidGroup(let code): self = .usage("the group's name or members are not valid (\(code)): a name is 1 to 128 bytes, no control characters")
        case ClientError.unreadableFile(let path): self = .usage("cannot read \(path) (it must be a readable regular file)")
        case ClientError.invalidUID(let uid): self = .usage("'\(uid)' is not a uid (1 to 128 of A-Z a-z 0-9 . _ -)")
        case ClientError.profileMismatch(let owner, let requested):
            self = .refused("this profile belongs to \(owner), not \(requested): use another --profile")
        case ClientError.notResendable(let id): self = .usage("no undelivered or held message \(id) (see `mailslot history`)")
        default: self = .failed("\(error)")
        }
    }
}

/// Prints results: a line for people, or one JSON object per line with --json.
struct Output {
    let json: Bool

    /// The JSON fields of a received message (``message(_:)``), for `--help` texts.
    static let receivedFieldsHelp = """
        id, from (the verified sender's uid), type (text, picture, location, receipt, typing, or another kind), timestamp \
        (the sender's clock, milliseconds since the epoch), and as the message carries them: text, location {latitude, \
        longitude}, receipt {kind, message_ids}, group {id, name} (for a message sent to a group), attachments [{media_type, bytes, name, path (where it was saved), state \
        (for one not saved: available, gone — the relay no longer has it —, or corrupt — it failed its checks), reason}]. \
        \(eventFieldsHelp)
        """

    /// The JSON fields of a sent message (``sent(_:)``), for `--help` texts.
    static let sentFieldsHelp = """
        id, to (empty for a group message), group {id, name} (for a group message; its state sums up its copies: queued \
        while one is, then held while one is), state (sent, queued, uploading — a file send not finished, held, \
        undelivered, refused), reason (the last problem, unless sent), and type, \
        timestamp, text, location, receipt, attachments as for a received message.
        """

    /// The JSON fields of a send's outcome (``outcome(_:to:)``, ``held(_:to:)``), for `--help` texts.
    static let outcomeFieldsHelp = """
        id (the message id), to, state (sent; queued: exit 75; refused: exit 69; held for a changed key: exit 65), reason \
        (a problem code, for queued, refused and held).
        """

    func emit(_ fields: [String: Any], text: String) {
        if json {
            let data = (try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8)
            print(String(decoding: data, as: UTF8.self))
        } else {
            print(text)
        }
        fflush(nil)  // all output streams: lines reach a pipe as they are printed
    }

    /// `value` as one JSON line (its own encoding, keys sorted) with --json, `text` otherwise.
    func emit(encoding value: some Encodable, text: String) throws {
        guard json else { return emit([:], text: text) }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        print(String(decoding: try encoder.encode(value), as: UTF8.self))
        fflush(nil)
    }

    /// A received message.
    func message(_ received: ReceivedMessage) {
        // A group change is not a message to read but what happened: `[Trip] · alice added dave`.
        guard received.message.type != .groupChange else { return groupEvents(received) }
        var fields: [String: Any] = ["id": received.id, "from": received.sender]
        var text = "[\(Timestamp.format(received.message.timestamp / 1000))] "
        if let group = received.group {
            // The group beside the sender: `[Trip] alice: see you at 8`.
            fields["group"] = ["id": group.id.rawValue, "name": group.name]
            text += "[\(group.name)] "
        }
        text += received.sender
        if let name = received.message.sender.name { text += " (\(name))" }
        describe(received.message, into: &fields, text: &text)
        if !received.attachments.isEmpty {
            fields["attachments"] = received.attachments.map(Self.fields(of:))
            text = text.replacingOccurrences(of: " [\(received.attachments.count) attachment(s)]", with: "")
            for attachment in received.attachments { text += "\n  " + Self.line(of: attachment) }
        }
        emit(fields, text: text)
    }

    /// A received file's JSON fields: where it was saved, or why not.
    private static func fields(of attachment: ReceivedAttachment) -> [String: Any] {
        var fields: [String: Any] = ["media_type": attachment.mediaType, "bytes": attachment.plainSize, "name": attachment.name ?? ""]
        switch attachment.state {
        case .saved(let url): fields["path"] = url.path
        case .available(let reason):
            fields["state"] = "available"
            if let reason { fields["reason"] = reason }
        case .gone: fields["state"] = "gone"
        case .corrupt(let code): fields["state"] = "corrupt"; fields["reason"] = code
        }
        return fields
    }

    /// A received file, for people: its saved path, or why it was not saved.
    private static func line(of attachment: ReceivedAttachment) -> String {
        let name = attachment.name ?? attachment.mediaType
        switch attachment.state {
        case .saved(let url): return "saved \(url.path)"
        case .available(let reason?): return "not saved: \(name) (\(attachment.plainSize) bytes): \(reason); `mailslot flush` tries again"
        case .available(nil): return "not downloaded: \(name) (\(attachment.plainSize) bytes, over --max-download)"
        case .gone: return "gone: \(name) — the relay no longer has it (expired or deleted by the sender)"
        case .corrupt(let code): return "corrupt: \(name) — it failed its checks (\(code)); nothing was saved"
        }
    }

    /// A message this profile sent, with where it stands (`sent`, `queued`, `held`, `undelivered`, `refused`).
    func sent(_ outgoing: OutgoingMessage, groupName: String? = nil) {
        var fields: [String: Any] = ["id": outgoing.id, "to": outgoing.recipient, "state": outgoing.state.rawValue]
        var to = outgoing.recipient
        if let group = outgoing.message?.group {
            // A group send: one row for every copy, to the group rather than to one uid.
            fields["group"] = ["id": group.id.rawValue, "name": groupName ?? ""]
            to = "[\(groupName ?? group.id.rawValue)]"
        }
        var text = "[\(outgoing.message.map { Timestamp.format($0.timestamp / 1000) } ?? "?")] → \(to) [\(outgoing.state.rawValue)]"
        if let reason = outgoing.reason, outgoing.state != .sent { fields["reason"] = reason.description }
        if let message = outgoing.message { describe(message, into: &fields, text: &text) }
        switch outgoing.state {
        case .undelivered: text += "  (not readable on their device: `mailslot resend \(outgoing.id)` once their key is trusted)"
        case .uploading: text += "  (file upload not finished\(outgoing.reason.map { ": \($0)" } ?? ""); `mailslot flush` finishes it)"
        case .held where outgoing.message?.group != nil:
            text += "  (a member's key changed: compare `mailslot fingerprint UID` with them; `mailslot trust UID --safety-number DIGITS` sends their copy)"
        case .held: text += "  (their key changed: compare `mailslot fingerprint \(outgoing.recipient)` with them; `mailslot trust \(outgoing.recipient) --safety-number DIGITS` sends it)"
        default: break
        }
        emit(fields, text: text)
    }

    /// What a chat message carries, as JSON fields and as the rest of a line.
    private func describe(_ message: ChatMessage, into fields: inout [String: Any], text: inout String) {
        fields["type"] = message.type.rawValue
        fields["timestamp"] = message.timestamp
        if let body = message.payload.text { fields["text"] = body; text += ": \(body)" }
        if let location = message.payload.location {
            fields["location"] = ["latitude": location.latitude, "longitude": location.longitude]
            text += " 📍 \(location.latitude),\(location.longitude)"
        }
        if let receipt = message.payload.receipt {
            fields["receipt"] = ["kind": receipt.kind.rawValue, "message_ids": receipt.messageIDs]
            text += " ✓ \(receipt.kind.rawValue) \(receipt.messageIDs.joined(separator: ","))"
        }
        let inline = message.payload.attachments?.map { ["media_type": $0.mediaType, "bytes": $0.data.count, "name": $0.name ?? ""] as [String: Any] } ?? []
        let files = message.payload.files?.map { ["media_type": $0.mediaType, "bytes": $0.plainSize, "name": $0.name ?? ""] as [String: Any] } ?? []
        if !(inline + files).isEmpty {
            fields["attachments"] = inline + files
            text += " [\((inline + files).count) attachment(s)]"
        }
        if message.type == .typing { text += " is typing…" }
    }

    /// What became of a send or a resend; a message that did not reach the relay is an error
    /// with its exit code (75 queued, 69 refused, 65 held for a changed key).
    func outcome(_ outcome: MailslotClient.SendOutcome, to uid: String, queuedMessage: String? = nil) throws {
        switch outcome {
        case .sent(let id):
            emit(["id": id, "to": uid, "state": "sent"], text: id)
        case .queued(let id, let reason):
            emit(["id": id, "to": uid, "state": "queued", "reason": reason.description], text: id)
            throw CLIError.queued(queuedMessage.map { "\($0) (\(reason))" } ?? "queued, not sent yet (\(reason)); `mailslot flush` retries")
        case .refused(let id, let reason):
            emit(["id": id, "to": uid, "state": "refused", "reason": reason.description], text: id)
            throw CLIError.unavailable("the relay refused the message: \(reason)")
        case .held(let id, let recipient):
            try held(id, to: recipient)
        }
    }

    /// A message held because `uid`'s identity key changed: said, then refused with exit 65.
    func held(_ id: String?, to uid: String) throws -> Never {
        emit(["id": id ?? NSNull(), "to": uid, "state": "held", "reason": "key_changed"], text: id ?? "")
        throw CLIError.refused("""
            \(uid)'s identity key changed; the message is held. Compare the NEW safety number (`mailslot fingerprint \(uid)`) with \
            them, then `mailslot trust \(uid) --safety-number DIGITS` sends it
            """)
    }
}

extension AsyncParsableCommand {
    /// Runs `body`, turning failures into their message on stderr and their exit code.
    func reporting(_ body: () async throws -> Void) async throws {
        try await reportingFailures(as: { CLIError($0) }, body)
    }
}

/// Runs `body`, turning a failure into its message on stderr and its exit code, as `describe`
/// reads it; bad arguments and exit codes from the parser stay the parser's.
func reportingFailures(as describe: (any Error) -> CLIError, _ body: () async throws -> Void) async throws {
    do {
        try await body()
    } catch let error as ValidationError {
        throw error
    } catch let error as ExitCode {
        throw error
    } catch {
        let failure = describe(error)
        FileHandle.standardError.write(Data("mailslot: \(failure.description)\n".utf8))
        throw failure.exitCode
    }
}
