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
        case ClientError.relay(let problem): self = .unavailable("the relay refused: \(problem.code.rawValue)\(problem.detail.map { " — \($0)" } ?? "")")
        case ClientError.unreachable(let why): self = .unavailable("the relay cannot be reached: \(why)")
        case ClientError.invalidResponse(let why): self = .unavailable("the relay answered something unexpected: \(why)")
        case ClientError.notSignedIn: self = .notLoggedIn("not logged in: run `mailslot login --relay URL --token TOKEN`")
        case ClientError.noKeys(let uid): self = .refused("\(uid) has published no keys yet (they must log in once)")
        case ClientError.invalidKeys(let uid, let code): self = .refused("the keys the relay serves for \(uid) are invalid (\(code))")
        case ClientError.keyChanged(let uid):
            self = .refused("\(uid)'s identity key changed. Compare `mailslot fingerprint \(uid)` with them, then `mailslot trust \(uid)`")
        case ClientError.cannotSeal(let code): self = .refused("the message cannot be sealed (\(code))")
        case ClientError.invalidUID(let uid): self = .usage("'\(uid)' is not a uid (1 to 128 of A-Z a-z 0-9 . _ -)")
        case ClientError.profileMismatch(let owner, let requested):
            self = .refused("this profile belongs to \(owner), not \(requested): use another --profile")
        default: self = .failed("\(error)")
        }
    }
}

/// Prints results: a line for people, or one JSON object per line with --json.
struct Output {
    let json: Bool

    func emit(_ fields: [String: Any], text: String) {
        if json {
            let data = (try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8)
            print(String(decoding: data, as: UTF8.self))
        } else {
            print(text)
        }
        fflush(nil)  // all output streams: lines reach a pipe as they are printed
    }

    func message(_ received: ReceivedMessage) {
        let message = received.message
        var fields: [String: Any] = ["id": received.id, "from": received.sender, "type": message.type.rawValue,
                                     "timestamp": message.timestamp]
        var text = "[\(Timestamp.format(message.timestamp / 1000))] \(received.sender)"
        if let name = message.sender.name { text += " (\(name))" }
        if let body = message.payload.text { fields["text"] = body; text += ": \(body)" }
        if let location = message.payload.location {
            fields["location"] = ["latitude": location.latitude, "longitude": location.longitude]
            text += " 📍 \(location.latitude),\(location.longitude)"
        }
        if let receipt = message.payload.receipt {
            fields["receipt"] = ["kind": receipt.kind.rawValue, "message_ids": receipt.messageIDs]
            text += " ✓ \(receipt.kind.rawValue) \(receipt.messageIDs.joined(separator: ","))"
        }
        if let attachments = message.payload.attachments {
            fields["attachments"] = attachments.map { ["media_type": $0.mediaType, "bytes": $0.data.count, "name": $0.name ?? ""] }
            text += " [\(attachments.count) attachment(s)]"
        }
        if message.type == .typing { text += " is typing…" }
        emit(fields, text: text)
    }
}

extension AsyncParsableCommand {
    /// Runs `body`, turning failures into their message on stderr and their exit code.
    func reporting(_ body: () async throws -> Void) async throws {
        do {
            try await body()
        } catch let error as ValidationError {
            throw error
        } catch let error as ExitCode {
            throw error
        } catch {
            let failure = CLIError(error)
            FileHandle.standardError.write(Data("mailslot: \(failure.description)\n".utf8))
            throw failure.exitCode
        }
    }
}
