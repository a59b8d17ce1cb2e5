import ArgumentParser
import Foundation
import MailslotClient
import MailslotWire

/// `mailslot login`: sign in, create keys on first use, publish them.
struct Login: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Sign in with a custom token; creates and publishes this profile's keys on first use.",
        discussion: "Prints your uid and fingerprint. Give the token as - to read it from stdin (it then stays out of your shell history).\n\n--json prints one object: uid, fingerprint (your 30 digits in groups of five), profile (its name).")
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
        abstract: "Send a message: text, a file of any size the relay takes, or a location. Prints the message id.",
        discussion: """
            With --file, TEXT is the file's caption. The file is encrypted on this machine and uploaded in parts (a picture \
            small enough goes inline, inside the message); a progress bar shows on stderr when it is a terminal (not with \
            --json). If the relay cannot be reached, or the send is interrupted (Ctrl-C), it stays queued (exit 75): \
            `mailslot flush` finishes it, sending only the parts the relay does not have. A file larger than the relay takes \
            is refused (exit 65). Without TEXT, --file or --location, the text is read from stdin. If the relay cannot be \
            reached the message is queued (exit 75): `mailslot flush` sends it later. With --no-wake the message wakes none \
            of the recipient's devices (`mailslot push`): it waits until they connect.

            With --group GROUP (the group's id, or its name when no other group of this profile has it: `mailslot group \
            list`) instead of a uid, the message goes to every member, each copy sealed in the pairwise session, under one \
            id; with --file, the file is uploaded once (one blob for all the members) and a small picture is not sent inline. \
            It prints the id, then the members whose copy was not sent, with why: held (their identity key changed: \
            compare `mailslot fingerprint UID`, then `mailslot trust UID --safety-number DIGITS` sends it; exit 65), refused \
            by the relay (exit 69), queued (exit 75). A group you are no longer in is refused (exit 65).

            --json prints one object: \(Output.outcomeFieldsHelp) With --group: id, group {id, name}, state (sent, or \
            partial), copies [{to, state (queued, refused, held), reason}] for the members whose copy was not sent.
            """)
    @OptionGroup var options: GlobalOptions
    @Argument(help: "The recipient's uid (not with --group: then the text comes first).") var uid: String?
    @Argument(help: "The text to send (with --file: its caption).") var text: String?
    @Option(help: ArgumentHelp("Send to every member of this group (its id or name) instead of to one uid.", valueName: "GROUP"))
    var group: String?
    @Option(help: "Send this file (any kind, any size the relay takes).") var file: String?
    @Option(name: .customLong("media-type"), help: ArgumentHelp("The file's media type (default: from its extension).", valueName: "TYPE"))
    var mediaType: String?
    @Option(help: ArgumentHelp("Send a location.", valueName: "LAT,LON")) var location: String?
    @Flag(name: .customLong("no-wake"), help: "Do not wake the recipient's devices for this message (it is delivered when they connect).")
    var noWake = false

    func run() async throws {
        try await reporting {
            if group != nil, text != nil { throw CLIError.usage("with --group, give the text only (no uid): `mailslot send --group GROUP TEXT`") }
            // With --group, the one argument is the text (or the caption).
            let recipient = group == nil ? uid : nil, text = group == nil ? self.text : uid
            guard group != nil || recipient != nil else { throw CLIError.usage("name the recipient's uid, or --group GROUP") }
            if let recipient, !Identifier.isValidUID(recipient) { throw ValidationError("'\(recipient)' is not a valid uid") }
            if let file {
                if noWake { throw CLIError.usage("--no-wake is for text and location messages, not with --file") }
                if let group {
                    try await sendFile(file, caption: text, mediaType: mediaType, toGroup: group)
                } else if let recipient {
                    try await sendFile(file, caption: text, mediaType: mediaType, to: recipient)
                }
                return
            }
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
                if let text {
                    body = text
                } else {
                    body = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
                }
                guard !body.isEmpty else { throw ValidationError("nothing to send") }
                payload = Payload(text: body)
                type = .text
            }
            if let group {
                try await sendToGroup(group, payload, type: type)
            } else {
                try await send(payload, type: type)
            }
        }
    }

    static let imageTypes = ["png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp"]

    private func send(_ payload: Payload, type: MessageType) async throws {
        let client = try Profile(options).client()
        // A held message (the recipient's key changed) is an outcome: said, with exit 65.
        let uid = self.uid ?? ""
        try Output(json: options.json).outcome(try await client.send(payload, type: type, to: uid, wake: noWake ? false : nil), to: uid)
    }

    /// Sends to every member of the group `text` names: the message id, then each member whose
    /// copy was not sent, with why (exit 65 held, 69 refused, 75 queued).
    private func sendToGroup(_ text: String, _ payload: Payload, type: MessageType) async throws {
        if noWake { throw CLIError.usage("--no-wake is for messages to one uid, not with --group") }
        let client = try Profile(options).client()
        let id = try await GroupFields.resolve(text, client: client)
        let outcome = try await client.send(payload, type: type, toGroup: id)
        let group = try await client.group(id)
        let output = Output(json: options.json)
        output.emit(["id": outcome.messageID, "group": ["id": group.id.rawValue, "name": group.name],
                     "state": outcome.allSent ? "sent" : "partial", "copies": GroupFields.copyFields(outcome)],
                    text: outcome.messageID)
        try GroupFields.reportCopies(outcome, output: output, json: options.json)
    }
}

/// `mailslot resend`: send an undelivered or held message again.
struct Resend: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send message ID again, sealed to the recipient's current keys: one their device could not open (`undelivered` in `history`), or one held for a key change.",
        discussion: "The same id is kept. While the recipient's new identity key is not trusted the message stays held (exit 65): compare `mailslot fingerprint UID` with them, then `mailslot trust UID --safety-number DIGITS`.\n\n--json prints one object: \(Output.outcomeFieldsHelp)")
    @OptionGroup var options: GlobalOptions
    @Argument(help: "The message id.") var id: String

    func run() async throws {
        try await reporting {
            let client = try Profile(options).client()
            let output = Output(json: options.json)
            let recipient = try await client.outgoing().first { $0.id == id }?.recipient
            try output.outcome(try await client.resend(id), to: recipient ?? "")
        }
    }
}

/// `mailslot rotate-key`: a new mailbox key.
struct RotateKey: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rotate-key",
        abstract: "Replace this profile's mailbox key and publish the new one (the identity key and fingerprint stay).",
        discussion: "Messages already sealed to the old key still open: it is kept for the longest message lifetime (30 days and a day).\n\n--json prints one object: state (rotated).")
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
        discussion: "Files that come with messages (inline pictures and files sent as blobs) are saved into --save-to DIR, each under a new name (the sender's, made safe; never overwriting: `name (1)`, …), and each saved path is printed; a progress bar shows each download on stderr when it is a terminal (not with --json). With --wait S, waits up to S seconds for at least one message. When the relay fails part way (an acknowledgement refused, the relay gone), every message stored before the failure is printed first, then the failure is reported with its exit code (69 for the relay); messages not acknowledged come again, and are acknowledged but not printed twice, at the next receive.\n\n--json prints one object per message: \(Output.receivedFieldsHelp)")
    @OptionGroup var options: GlobalOptions
    @OptionGroup var files: SaveOptions
    @Option(help: ArgumentHelp("Wait up to this many seconds for a message.", valueName: "S")) var wait: Double = 0

    func run() async throws {
        try await reporting {
            let client = try Profile(options).client(attachments: try files.policy(json: options.json))
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
        abstract: "Stay connected and print messages as they arrive (Ctrl-C to stop).",
        discussion: """
            Files that come with messages are saved into --save-to DIR as `receive` saves them (with a progress bar on a \
            terminal), and each saved path is printed.

            --json prints one object per line. Messages: \(Output.receivedFieldsHelp) The connection's state: state (started, \
            with queued: messages still in the outbox; connecting; connected; waiting, with seconds until the next try and \
            reason).
            """)
    @OptionGroup var options: GlobalOptions
    @OptionGroup var files: SaveOptions

    func run() async throws {
        try await reporting {
            let client = try Profile(options).client(attachments: try files.policy(json: options.json))
            let output = Output(json: options.json)
            let flushed = try await client.flush()
            output.emit(["state": "started", "queued": flushed], text: "listening (\(flushed) message(s) still queued); Ctrl-C to stop")
            let stateOutput = output
            let stream = client.messages { state in
                switch state {
                case .connecting: stateOutput.emit(["state": "connecting"], text: "· connecting…")
                case .connected: stateOutput.emit(["state": "connected"], text: "· connected")
                case .waiting(let seconds, let reason):
                    stateOutput.emit(["state": "waiting", "seconds": seconds, "reason": reason.description],
                                     text: String(format: "· disconnected (%@); retrying in %.1f s", reason.description, seconds))
                }
            }
            for try await message in stream { output.message(message) }
        }
    }
}

/// `mailslot history`: stored and sent messages.
struct History: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print received and sent messages, oldest first (in the order this profile stored them); only those with UID when given.",
        discussion: """
            With --group GROUP, only the messages sent to that group (with UID too: only those UID sent to it). \
            Sent messages show where they stand: sent, queued, held (the recipient's key changed: compare `mailslot fingerprint UID` \
            with them, then `mailslot trust UID --safety-number DIGITS` sends it), undelivered (their device could not open it: \
            `mailslot resend ID`) or refused. The order is when this profile stored each message (received, or written), by this \
            machine's clock, not the sender's. Messages that did not open or verify, and why: `mailslot rejected`.

            --json prints one object per message. Received: \(Output.receivedFieldsHelp) Sent: \(Output.sentFieldsHelp)
            """)
    @OptionGroup var options: GlobalOptions
    @Argument(help: "Only messages from or to this uid.") var uid: String?
    @Option(help: ArgumentHelp("Only messages sent to this group (its id or name), by anyone.", valueName: "GROUP")) var group: String?

    func run() async throws {
        try await reporting {
            let client = try Profile(options).client()
            let output = Output(json: options.json)
            var only: GroupID?
            if let group { only = try await GroupFields.resolve(group, client: client) }
            let names = Dictionary(try await client.groups().map { ($0.id, $0.name) }) { first, _ in first }
            for entry in try await client.timeline(with: only == nil ? uid : nil) {
                switch entry {
                case .received(let message, _):
                    guard only == nil || message.group?.id == only, uid == nil || only == nil || message.sender == uid else { continue }
                    output.message(message)
                case .sent(let message):
                    // A group's own bookkeeping (changes, asks for them, their answers) is not a message.
                    let chat = message.message
                    if let chat, chat.group != nil, Self.control.contains(chat.type) { continue }
                    if only != nil, chat?.group?.id != only || uid != nil { continue }
                    output.sent(message, groupName: chat?.group.flatMap { names[$0.id] })
                }
            }
        }
    }

    /// The types a group sends for its own bookkeeping, not shown as messages.
    static let control: Set<MessageType> = [.groupChange, .groupSync, .groupHistory]
}

/// `mailslot rejected`: what was not accepted, and why.
struct Rejected: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List messages that were not accepted, oldest first: received ones that did not open or verify, and sent ones the relay refused, with why.",
        discussion: """
            A received message is rejected when its envelope does not open on this device (envelope_cannot_decrypt: sealed to \
            keys it does not hold; its author is told), its signature or author does not verify, or its sender's identity key \
            changed and is not trusted yet (key_changed: compare `mailslot fingerprint UID`, then `mailslot trust UID \
            --safety-number DIGITS`; messages after that open). A sent message is refused when the relay will not store it \
            (blocked, invalid, …).

            A group message is rejected by the group rules with a group_ code: group_not_member (its sender is not a member \
            as this profile knows the group), group_left (you are out of the group), group_state_unknown or group_unknown \
            (it named a state of the group that never came), or a change that does not verify (group_bad_signature, …).

            --json prints one object per message: direction ("in": received and rejected, "out": sent and refused), id, from \
            (the author the relay named, for "in") or to (the recipient, for "out"), reason (an error code), group {id, name} \
            (for a group message: name empty when this profile does not know the group; an "out" one also has copies [{to, \
            state, reason}]), at (when: received, or written for \
            "out"; RFC 3339 UTC).
            """)
    @OptionGroup var options: GlobalOptions

    func run() async throws {
        try await reporting {
            let client = try Profile(options).client()
            let output = Output(json: options.json)
            let names = Dictionary(try await client.groups().map { ($0.id, $0.name) }) { first, _ in first }
            let incoming = try await client.rejected().map { rejected in
                var fields: [String: Any] = ["direction": "in", "id": rejected.id, "from": rejected.author, "reason": rejected.reason.code]
                var group = ""
                if let id = rejected.group {
                    // A group refusal names its group (the name only when this profile knows it).
                    fields["group"] = ["id": id.rawValue, "name": names[id] ?? ""]
                    group = "[\(names[id] ?? id.rawValue)] "
                }
                return (rejected.receivedAt, fields, "← \(group)\(rejected.author) \(rejected.id) rejected: \(rejected.reason)")
            }
            var outgoing: [(Date, [String: Any], String)] = []
            for refused in try await client.outgoing() where refused.state == .refused {
                var reason = refused.reason?.description ?? "refused"
                var fields: [String: Any] = ["direction": "out", "id": refused.id, "to": refused.recipient]
                var to = refused.recipient
                if let id = refused.message?.group?.id {
                    // A group send the relay refused for every member: named by its group, with
                    // each copy's refusal (one reason when they all share it).
                    fields["group"] = ["id": id.rawValue, "name": names[id] ?? ""]
                    to = "[\(names[id] ?? id.rawValue)]"
                    let copies = GroupFields.copyFields(try await client.copies(of: refused.id))
                    fields["copies"] = copies
                    let reasons = Set(copies.compactMap { $0["reason"] as? String })
                    if reasons.count == 1, let only = reasons.first { reason = only }
                }
                fields["reason"] = reason
                outgoing.append((refused.createdAt, fields, "→ \(to) \(refused.id) refused: \(reason)"))
            }
            for (at, fields, text) in (incoming + outgoing).sorted(by: { $0.0 < $1.0 }) {
                let when = Timestamp.format(Int64(at.timeIntervalSince1970.rounded(.down)))
                output.emit(fields.merging(["at": when]) { $1 }, text: "[\(when)] \(text)")
            }
        }
    }
}

/// `mailslot contacts`: pinned contacts.
struct Contacts: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List contacts and how far their keys are trusted.",
        discussion: "Trust: pinned (first use, not compared), verified (`mailslot trust`), changed (a new identity key waits to be compared and trusted), disputed (a comparison did not match: nothing is sent to or accepted from them until one does).\n\n--json prints one object per contact: uid, trust.")
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
        abstract: "Print the safety number you share with UID: compare it with them, in person or by voice.",
        discussion: """
            Both of you run it (they run `mailslot fingerprint YOUR-UID`) and read out the 60 digits; when they are the same, \
            run `mailslot trust UID --safety-number DIGITS`. While UID's identity key has CHANGED (a reinstall, or someone \
            substituting keys) it prints the number of the NEW key, the one `trust` installs, and the old number for \
            reference: compare the new one. If they differ from what UID reads out, do not trust.

            --json prints one object: uid, safety_number (the 60 digits in groups of five, on one line), key_changed (true \
            while UID's new identity key is not trusted: safety_number is the new key's), previous_safety_number (the old \
            key's number while key_changed, otherwise null), fingerprint (UID's 30 digits for the key safety_number is for), \
            key_id (the keys `trust` installs), trust (pinned, verified, changed, or disputed: a comparison did not \
            match, and nothing is sent to or accepted from UID until one does).
            """)
    @OptionGroup var options: GlobalOptions
    @Argument(help: "The contact's uid.") var uid: String

    func run() async throws {
        try await reporting {
            let check = try await Profile(options).client().safetyNumberCheck(with: uid)
            let fields: [String: Any] = [
                "uid": uid, "safety_number": check.safetyNumber.replacingOccurrences(of: "\n", with: " "), "key_changed": check.isNewKey,
                "previous_safety_number": check.previousSafetyNumber.map { $0.replacingOccurrences(of: "\n", with: " ") } ?? NSNull(),
                "fingerprint": check.fingerprint, "key_id": check.keyID, "trust": check.trust.rawValue,
            ]
            guard check.isNewKey, let previous = check.previousSafetyNumber else {
                let disputed = check.trust == .disputed ? """

                    A comparison with \(uid) did not match this number: nothing is sent to or accepted from \(uid) until \
                    one does (`mailslot trust \(uid) --safety-number DIGITS`). If \(uid) reads out another number, someone \
                    may be substituting keys.
                    """ : ""
                Output(json: options.json).emit(fields, text: check.safetyNumber + disputed)
                return
            }
            Output(json: options.json).emit(fields, text: """
                \(uid)'s identity key CHANGED (a new device, or someone substituting keys). The NEW safety number is:
                \(check.safetyNumber)
                The old one was:
                \(previous)
                Compare the NEW one with \(uid), in person or by voice. Only if it is the same on both sides:
                  mailslot trust \(uid) --safety-number DIGITS
                """)
        }
    }
}

/// `mailslot trust`: accept a contact's current keys.
struct Trust: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Trust UID's keys after comparing the safety number with them (also after their key changed).",
        discussion: """
            Give the number you compared: --safety-number DIGITS (the 60 digits `mailslot fingerprint UID` prints; spaces and \
            line breaks are ignored, so quote it). Without the option it is asked for when stdin is a terminal, and refused \
            (exit 64) otherwise. The number must be the one of the key `trust` installs — after a key change, the NEW key's: a \
            number that is not is refused (exit 65) and nothing changes (the relay may have offered other keys since you \
            compared: run `mailslot fingerprint UID` again). Messages held for the key change are then sent.

            --json prints one object: uid, trust (verified), key_id (the keys now trusted).
            """)
    @OptionGroup var options: GlobalOptions
    @Argument(help: "The contact's uid.") var uid: String
    @Option(name: .customLong("safety-number"), help: ArgumentHelp("The safety number you compared with UID (60 digits).", valueName: "DIGITS"))
    var safetyNumber: String?

    func run() async throws {
        try await reporting {
            guard Identifier.isValidUID(uid) else { throw ClientError.invalidUID(text: uid) }
            let number = try safetyNumber ?? askForNumber()
            let contact = try await Profile(options).client().trust(uid, safetyNumber: number)
            Output(json: options.json).emit(["uid": contact.uid, "trust": contact.trust.rawValue, "key_id": contact.keyID],
                                            text: "\(contact.uid) is \(contact.trust.rawValue)")
        }
    }

    /// The number typed at the terminal (a pasted three-line number is read whole); never asked
    /// of a pipe or a file, where nobody compared anything.
    private func askForNumber() throws -> String {
        guard isatty(STDIN_FILENO) != 0 else {
            throw CLIError.usage("pass --safety-number DIGITS: the safety number `mailslot fingerprint \(uid)` prints, after comparing it with \(uid)")
        }
        FileHandle.standardError.write(Data("The safety number you compared with \(uid) (60 digits, as `mailslot fingerprint \(uid)` prints it): ".utf8))
        var typed = ""
        // ASCII digits only, as `trust` counts them: other numerals would end the prompt early.
        while typed.utf8.count(where: { (0x30...0x39).contains($0) }) < 60, let line = readLine(strippingNewline: true), !line.isEmpty { typed += line + " " }
        return typed
    }
}

/// `mailslot unsend`: delete a message its recipients have not received yet.
struct Unsend: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Take back a message UID has not received yet; with --group GROUP, from every member who has not received it.",
        discussion: """
            `mailslot unsend UID ID` erases the message `send` printed from UID's mailbox on the relay, unless UID received \
            it already.

            `mailslot unsend --group GROUP ID` (GROUP: the group's id, or its name when no other group of this profile has \
            it) erases each member's copy the relay still holds, one request per copy, and drops the copies not yet handed \
            to the relay (queued, or held for a changed key); a member who received their copy keeps it. It prints \
            `unsent ID from N of M members` (M: the members a copy was sent to or waited for). An id this profile did not \
            send to that group, an unknown or ambiguous GROUP, and a UID with --group are refused (exit 64).

            --json prints one object: id, state (unsent); with --group also group {id, name}, erased (the uids whose copy \
            the relay erased before they received it), dropped (the uids whose copy had not gone to the relay yet).
            """)
    @OptionGroup var options: GlobalOptions
    @Argument(help: "The recipient's uid (not with --group: then the id comes alone).") var uid: String?
    @Argument(help: "The message id `send` printed.") var id: String?
    @Option(help: ArgumentHelp("Take the message back from every member of this group (its id or name) who has not received it.",
                               valueName: "GROUP"))
    var group: String?

    func run() async throws {
        try await reporting {
            if let group {
                // With --group, the one argument is the message id.
                guard id == nil else { throw CLIError.usage("with --group, give the message id only (no uid): `mailslot unsend --group GROUP ID`") }
                guard let id = uid else { throw CLIError.usage("name the message id: `mailslot unsend --group GROUP ID`") }
                return try await unsend(id, fromGroup: group)
            }
            guard let uid, let id else { throw CLIError.usage("name the recipient's uid and the message id (`mailslot unsend UID ID`), or --group GROUP ID") }
            try await Profile(options).client().unsend(id, to: uid)
            Output(json: options.json).emit(["id": id, "state": "unsent"], text: "unsent \(id)")
        }
    }

    /// Takes group message `id` back from the members of the group `text` names who have not
    /// received it, and says from how many.
    private func unsend(_ id: String, fromGroup text: String) async throws {
        let client = try Profile(options).client()
        let groupID = try await GroupFields.resolve(text, client: client)
        let group = try await client.group(groupID)
        // Read before: unsending drops the copies not handed to the relay yet, and they leave the list.
        let before = try await client.copies(of: id).copies
        let erased: [String]
        do {
            erased = try await client.unsend(id, toGroup: groupID)
        } catch ClientError.notResendable {
            throw CLIError.usage("no message \(id) sent to group \(group.name) from this profile (see `mailslot history --group \(groupID)`)")
        }
        // A refused copy never reached its member: neither taken back nor kept.
        let tried = before.filter { if case .refused = $0.value { false } else { true } }
        let dropped = tried.compactMap { member, copy -> String? in
            switch copy {
            case .queued, .held: member
            case .sent, .refused: nil
            }
        }.sorted()
        let takenBack = erased.count + dropped.count
        var text = "unsent \(id) from \(takenBack) of \(tried.count) members"
        if takenBack < tried.count {
            text += " (\(tried.count - takenBack) had received it already, or the relay could not be asked)"
        }
        Output(json: options.json).emit(["id": id, "state": "unsent", "group": ["id": groupID.rawValue, "name": group.name],
                                         "erased": erased, "dropped": dropped], text: text)
    }
}

/// `mailslot block`: refuse messages from a user.
struct Block: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Refuse messages from UID at the relay.", discussion: "--json prints one object: uid, state (blocked).")
    @OptionGroup var options: GlobalOptions
    @Argument(help: "The uid to block.") var uid: String

    func run() async throws {
        try await reporting {
            try await Profile(options).client().block(uid)
            Output(json: options.json).emit(["uid": uid, "state": "blocked"], text: "blocked \(uid)")
        }
    }
}

/// `mailslot unblock`: let a user write again.
struct Unblock: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Let UID send you messages again (undoes `mailslot block`).",
        discussion: "Unblocking someone who is not blocked is not an error.\n\n--json prints one object: uid, state (unblocked, or not_blocked).")
    @OptionGroup var options: GlobalOptions
    @Argument(help: "The uid to unblock.") var uid: String

    func run() async throws {
        try await reporting {
            let wasBlocked = try await Profile(options).client().unblock(uid)
            Output(json: options.json).emit(["uid": uid, "state": wasBlocked ? "unblocked" : "not_blocked"],
                                            text: wasBlocked ? "unblocked \(uid)" : "\(uid) was not blocked")
        }
    }
}

/// `mailslot flush`: retry the outbox.
struct Flush: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send queued messages now, and finish interrupted file sends and downloads. Exit 75 while some remain queued.",
        discussion: "A file send resumes where the relay's record of received parts says it stopped: at most the part in flight is sent again. --json prints one object: queued (how many are still queued or uploading).")
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
    static let configuration = CommandConfiguration(abstract: "End the session at the relay. Keys, contacts and messages stay in the profile.", discussion: "--json prints one object: profile, state (logged out).")
    @OptionGroup var options: GlobalOptions

    func run() async throws {
        try await reporting {
            let profile = try Profile(options)
            try await profile.client().signOut()
            Output(json: options.json).emit(["profile": profile.name, "state": "logged out"], text: "logged out")
        }
    }
}

/// Where `receive` and `listen` save files.
struct SaveOptions: ParsableArguments {
    @Option(name: .customLong("save-to"), help: ArgumentHelp("Save received files here (default: the profile's files/ folder, private to you).", valueName: "DIR"))
    var saveTo: String?
    @Option(name: .customLong("max-download"), help: ArgumentHelp("Only download files smaller than this many bytes (larger ones wait; default: all).", valueName: "BYTES"))
    var maxDownload: Int64?

    /// The client's attachment policy for these options.
    func policy() throws -> AttachmentPolicy {
        if let maxDownload, maxDownload < 0 { throw ValidationError("--max-download takes a number of bytes, 0 or more") }
        let directory = saveTo.map { URL(fileURLWithPath: ($0 as NSString).expandingTildeInPath, isDirectory: true) }
        return AttachmentPolicy(directory: directory, downloadAutomaticallyBelow: maxDownload ?? .max)
    }
}
