import ArgumentParser
import Foundation
import MailslotClient
import MailslotWire

/// `mailslot login`: sign in, create keys on first use, publish them.
struct Login: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Sign in with a custom token; creates and publishes this profile's keys on first use.",
        discussion: "Prints your uid and fingerprint. Give the token as - to read it from stdin (it then stays out of your shell history).")
    @OptionGroup var options: GlobalOptions
    @Option(help: "The relay's URL, e.g. https://relay.example.com") var relay: String
    @Option(help: "A custom token from your app's backend, or - for stdin.") var token: String

    func run() async throws {
        try await reporting {
            let profile = try Profile(options)
            let text = token == "-" ? (readLine(strippingNewline: true) ?? "") : token
            guard !text.isEmpty else { throw ValidationError("the token is empty") }
            let client = try profile.client(token: text, relay: relay)
            let uid = try await client.signIn()
            try profile.save(.init(relay: relay, uid: uid))
            let fingerprint = try await client.ownFingerprint()
            Output(json: options.json).emit(["uid": uid, "fingerprint": fingerprint, "profile": profile.name],
                                            text: "logged in as \(uid)\nyour fingerprint: \(fingerprint)")
        }
    }
}

/// `mailslot send`: seal and send one message.
struct Send: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send a message: text, a file (a picture for .png .jpg .gif .webp, otherwise its text), or a location. Prints the message id.",
        discussion: "With a picture, TEXT is its caption. Without TEXT, --file or --location, the text is read from stdin. If the relay cannot be reached the message is queued (exit 75): `mailslot flush` sends it later.")
    @OptionGroup var options: GlobalOptions
    @Argument(help: "The recipient's uid.") var uid: String
    @Argument(help: "The text to send.") var text: String?
    @Option(help: "Send the contents of this text file.") var file: String?
    @Option(help: ArgumentHelp("Send a location.", valueName: "LAT,LON")) var location: String?

    func run() async throws {
        try await reporting {
            guard Identifier.isValidUID(uid) else { throw ValidationError("'\(uid)' is not a valid uid") }
            let payload: Payload, type: MessageType
            if let location {
                let parts = location.split(separator: ",").compactMap { Double($0.trimmingCharacters(in: .whitespaces)) }
                guard parts.count == 2, (-90...90).contains(parts[0]), (-180...180).contains(parts[1]) else {
                    throw ValidationError("--location takes LAT,LON, e.g. 52.52,13.405")
                }
                payload = Payload(location: Location(latitude: parts[0], longitude: parts[1]))
                type = .location
            } else {
                let body: String
                if let file {
                    guard let data = FileManager.default.contents(atPath: file) else { throw ValidationError("cannot read \(file)") }
                    if let mediaType = Self.imageTypes[(file as NSString).pathExtension.lowercased()] {
                        // A picture travels inline, inside the envelope; `text` is its caption.
                        let attachment = Attachment(mediaType: mediaType, data: Array(data), name: (file as NSString).lastPathComponent)
                        try await send(Payload(text: text, attachments: [attachment]), type: .picture)
                        return
                    }
                    body = String(decoding: data, as: UTF8.self)
                } else if let text {
                    body = text
                } else {
                    body = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
                }
                guard !body.isEmpty else { throw ValidationError("nothing to send") }
                payload = Payload(text: body)
                type = .text
            }
            try await send(payload, type: type)
        }
    }

    static let imageTypes = ["png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp"]

    private func send(_ payload: Payload, type: MessageType) async throws {
        let client = try Profile(options).client()
        let output = Output(json: options.json)
        do {
            try output.outcome(try await client.send(payload, type: type, to: uid), to: uid)
        } catch ClientError.keyChanged(let recipient) where recipient == uid {
            let held = try await client.outgoing().last { $0.recipient == uid && $0.state == .held }
            try output.held(held?.id, to: uid)
        }
    }
}

/// `mailslot resend`: send an undelivered or held message again.
struct Resend: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send message ID again, sealed to the recipient's current keys: one their device could not open (`undelivered` in `history`), or one held for a key change.",
        discussion: "The same id is kept. While the recipient's new identity key is not trusted the message stays held (exit 65): compare the fingerprint, then `mailslot trust UID`.")
    @OptionGroup var options: GlobalOptions
    @Argument(help: "The message id.") var id: String

    func run() async throws {
        try await reporting {
            let client = try Profile(options).client()
            let output = Output(json: options.json)
            let recipient = try await client.outgoing().first { $0.id == id }?.recipient
            do {
                try output.outcome(try await client.resend(id), to: recipient ?? "")
            } catch ClientError.keyChanged(let uid) {
                try output.held(id, to: uid)
            }
        }
    }
}

/// `mailslot rotate-key`: a new mailbox key.
struct RotateKey: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rotate-key",
        abstract: "Replace this profile's mailbox key and publish the new one (the identity key and fingerprint stay).",
        discussion: "Messages already sealed to the old key still open: it is kept for the longest message lifetime (30 days and a day).")
    @OptionGroup var options: GlobalOptions

    func run() async throws {
        try await reporting {
            try await Profile(options).client().rotateMailboxKey()
            Output(json: options.json).emit(["state": "rotated"], text: "mailbox key rotated and published")
        }
    }
}

/// `mailslot receive`: fetch, store, ack, print, exit.
struct Receive: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Fetch waiting messages, store them, acknowledge them (the relay erases them), print them.",
        discussion: "With --wait S, waits up to S seconds for at least one message. When the relay fails part way (an acknowledgement refused, the relay gone), every message stored before the failure is printed first, then the failure is reported with its exit code (69 for the relay); messages not acknowledged come again, and are acknowledged but not printed twice, at the next receive.")
    @OptionGroup var options: GlobalOptions
    @Option(help: ArgumentHelp("Wait up to this many seconds for a message.", valueName: "S")) var wait: Double = 0

    func run() async throws {
        try await reporting {
            let client = try Profile(options).client()
            let output = Output(json: options.json)
            let deadline = Date().addingTimeInterval(max(0, wait))
            do {
                var messages = try await client.receive()
                while messages.isEmpty, Date() < deadline {
                    try await Task.sleep(for: .milliseconds(500))
                    messages = try await client.receive()
                }
                for message in messages { output.message(message) }
            } catch let interrupted as ReceiveInterrupted {
                // What was stored is shown before the failure: it is not lost from the output.
                for message in interrupted.received { output.message(message) }
                throw interrupted.failure
            }
        }
    }
}

/// `mailslot listen`: a live session.
struct Listen: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Stay connected and print messages as they arrive (Ctrl-C to stop).")
    @OptionGroup var options: GlobalOptions

    func run() async throws {
        try await reporting {
            let client = try Profile(options).client()
            let output = Output(json: options.json)
            let flushed = try await client.flush()
            output.emit(["state": "started", "queued": flushed], text: "listening (\(flushed) message(s) still queued); Ctrl-C to stop")
            let stateOutput = output
            let stream = client.messages { state in
                switch state {
                case .connecting: stateOutput.emit(["state": "connecting"], text: "· connecting…")
                case .connected: stateOutput.emit(["state": "connected"], text: "· connected")
                case .waiting(let seconds, let reason):
                    stateOutput.emit(["state": "waiting", "seconds": seconds, "reason": reason],
                                     text: String(format: "· disconnected (%@); retrying in %.1f s", reason, seconds))
                }
            }
            for try await message in stream { output.message(message) }
        }
    }
}

/// `mailslot history`: stored and sent messages.
struct History: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print received and sent messages, oldest first; only those with UID when given.",
        discussion: "Sent messages show where they stand: sent, queued, held (the recipient's key changed: `mailslot trust UID` sends it), undelivered (their device could not open it: `mailslot resend ID`) or refused.")
    @OptionGroup var options: GlobalOptions
    @Argument(help: "Only messages from or to this uid.") var uid: String?

    func run() async throws {
        try await reporting {
            let client = try Profile(options).client()
            let output = Output(json: options.json)
            let received = try await client.history(from: uid)
            let sent = try await client.outgoing().filter { uid == nil || $0.recipient == uid }
            // Message ids are time-ordered: one sequence, oldest first.
            var (r, s) = (received[...], sent[...])
            while let next = r.first, let other = s.first {
                if next.id <= other.id { output.message(next); r = r.dropFirst() } else { output.sent(other); s = s.dropFirst() }
            }
            r.forEach(output.message)
            s.forEach(output.sent)
        }
    }
}

/// `mailslot contacts`: pinned contacts.
struct Contacts: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List contacts and how far their keys are trusted.")
    @OptionGroup var options: GlobalOptions

    func run() async throws {
        try await reporting {
            let client = try Profile(options).client()
            let output = Output(json: options.json)
            for contact in try await client.contacts() {
                output.emit(["uid": contact.uid, "trust": contact.trust.rawValue], text: "\(contact.uid)\t\(contact.trust.rawValue)")
            }
        }
    }
}

/// `mailslot fingerprint`: the safety number with a contact.
struct Fingerprint: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the safety number you share with UID: compare it with them, in person or by voice.")
    @OptionGroup var options: GlobalOptions
    @Argument(help: "The contact's uid.") var uid: String

    func run() async throws {
        try await reporting {
            let number = try await Profile(options).client().safetyNumber(with: uid)
            Output(json: options.json).emit(["uid": uid, "safety_number": number.replacingOccurrences(of: "\n", with: " ")], text: number)
        }
    }
}

/// `mailslot trust`: accept a contact's current keys.
struct Trust: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Trust UID's keys after comparing the safety number (also after their key changed).")
    @OptionGroup var options: GlobalOptions
    @Argument(help: "The contact's uid.") var uid: String

    func run() async throws {
        try await reporting {
            let contact = try await Profile(options).client().trust(uid)
            Output(json: options.json).emit(["uid": contact.uid, "trust": contact.trust.rawValue], text: "\(contact.uid) is \(contact.trust.rawValue)")
        }
    }
}

/// `mailslot unsend`: delete a message the recipient has not received yet.
struct Unsend: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Take back a message UID has not received yet.")
    @OptionGroup var options: GlobalOptions
    @Argument(help: "The recipient's uid.") var uid: String
    @Argument(help: "The message id `send` printed.") var id: String

    func run() async throws {
        try await reporting {
            try await Profile(options).client().unsend(id, to: uid)
            Output(json: options.json).emit(["id": id, "state": "unsent"], text: "unsent \(id)")
        }
    }
}

/// `mailslot block`: refuse messages from a user.
struct Block: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Refuse messages from UID at the relay.")
    @OptionGroup var options: GlobalOptions
    @Argument(help: "The uid to block.") var uid: String

    func run() async throws {
        try await reporting {
            try await Profile(options).client().block(uid)
            Output(json: options.json).emit(["uid": uid, "state": "blocked"], text: "blocked \(uid)")
        }
    }
}

/// `mailslot flush`: retry the outbox.
struct Flush: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Send queued messages now. Exit 75 while some remain queued.")
    @OptionGroup var options: GlobalOptions

    func run() async throws {
        try await reporting {
            let remaining = try await Profile(options).client().flush(now: Date().addingTimeInterval(86_400))
            Output(json: options.json).emit(["queued": remaining], text: "\(remaining) message(s) still queued")
            if remaining > 0 { throw CLIError.queued("\(remaining) message(s) still queued") }
        }
    }
}

/// `mailslot logout`: end the session.
struct Logout: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "End the session at the relay. Keys, contacts and messages stay in the profile.")
    @OptionGroup var options: GlobalOptions

    func run() async throws {
        try await reporting {
            let profile = try Profile(options)
            try await profile.client().signOut()
            Output(json: options.json).emit(["profile": profile.name, "state": "logged out"], text: "logged out")
        }
    }
}
