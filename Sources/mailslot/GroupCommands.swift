import ArgumentParser
import Foundation
import MailslotClient
import MailslotWire

// `mailslot group`: group chats (issue 30 item 5; docs/design/groups.md §7.5; spec/groups.md).
// Groups live in the profile only: the relay keeps no group state, and sees, as for 1:1
// messages, who sends to whom. Every change is signed here and sent to every member through its
// pairwise session; `send --group` sends one message to every member.

/// `mailslot group`: the command tree.
struct GroupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "group",
        abstract: "Group chats: create one, change its members and admins, list and show them. `mailslot send --group GROUP` writes to one.",
        discussion: """
            GROUP is a group's id (22 characters, as `group create` prints it) or its name when no other group of this \
            profile has that name (an unknown or ambiguous name exits 64 and lists the candidates). The creator is the \
            group's first admin; admins add, remove, promote, demote and rename (an admin only acts on admins promoted after \
            them); any member may leave. A new member sees what is sent after they were added, not before. A removed member \
            gets no copy of anything sent after the removal.

            A change goes to every member, old and new, each copy sealed in its pairwise session. It prints `group NAME: \
            version N`, and each member whose copy was not sent with why. Exit codes as `send`: 0 · 64 bad arguments or an \
            unknown group · 65 refused (not an admin, not a member, a change the group rules refuse, over 1,000 members), or a \
            copy held because that member's identity key changed (compare `mailslot fingerprint UID`, then `mailslot trust UID \
            --safety-number DIGITS` sends it) · 69 a copy the relay refused · 75 copies queued (`mailslot flush` sends them).
            """,
        subcommands: [GroupCreate.self, GroupAdd.self, GroupRemove.self, GroupPromote.self, GroupDemote.self, GroupRename.self,
                      GroupLeave.self, GroupList.self, GroupShow.self])
}

/// `mailslot group create`: a new group with this profile as its first admin.
struct GroupCreate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "create",
        abstract: "Create a group named NAME with the members UID… (you are its first admin). Prints the group's id.",
        discussion: """
            Every member must have logged in once (their keys are fetched first: nothing is created otherwise). The name \
            is 1 to 128 bytes, no control characters. Members the relay cannot be reached for get the group with the next \
            `mailslot flush`.

            --json prints one object: \(GroupFields.help)
            """)
    @OptionGroup var options: GlobalOptions
    @Argument(help: "The group's name.") var name: String
    @Argument(help: "The other members' uids.") var uids: [String] = []

    func run() async throws {
        try await reporting {
            let client = try Profile(options).client()
            let group = try await client.createGroup(name: name, members: uids)
            Output(json: options.json).emit(GroupFields.of(group), text: group.id.rawValue)
        }
    }
}

/// What `group add|remove|promote|demote` take.
struct GroupMembersArguments: ParsableArguments {
    @Argument(help: "The group's id or name.") var group: String
    @Argument(help: "The members' uids.") var uids: [String]

    func validate() throws {
        if uids.isEmpty { throw ValidationError("name at least one uid") }
    }
}

/// `mailslot group add`.
struct GroupAdd: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add",
        abstract: "Add members UID… to GROUP (admins only). They see what is sent from now on, not before.",
        discussion: "Every new member must have logged in once. \(GroupFields.changeHelp)")
    @OptionGroup var options: GlobalOptions
    @OptionGroup var arguments: GroupMembersArguments

    func run() async throws {
        try await GroupFields.change(arguments.group, options: options) { client, id in try await client.addMembers(arguments.uids, to: id) }
    }
}

/// `mailslot group remove`.
struct GroupRemove: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remove",
        abstract: "Remove members UID… from GROUP (admins only; an admin only removes admins promoted after them).",
        discussion: "The removed are told, and get nothing sent to the group after it from any member. \(GroupFields.changeHelp)")
    @OptionGroup var options: GlobalOptions
    @OptionGroup var arguments: GroupMembersArguments

    func run() async throws {
        try await GroupFields.change(arguments.group, options: options) { client, id in try await client.removeMembers(arguments.uids, from: id) }
    }
}

/// `mailslot group promote`.
struct GroupPromote: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "promote",
        abstract: "Make members UID… admins of GROUP, after every admin it has (admins only).",
        discussion: GroupFields.changeHelp)
    @OptionGroup var options: GlobalOptions
    @OptionGroup var arguments: GroupMembersArguments

    func run() async throws {
        try await GroupFields.change(arguments.group, options: options) { client, id in try await client.promote(arguments.uids, in: id) }
    }
}

/// `mailslot group demote`.
struct GroupDemote: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demote",
        abstract: "Make admins UID… plain members of GROUP again (admins only; only admins promoted after you).",
        discussion: GroupFields.changeHelp)
    @OptionGroup var options: GlobalOptions
    @OptionGroup var arguments: GroupMembersArguments

    func run() async throws {
        try await GroupFields.change(arguments.group, options: options) { client, id in try await client.demote(arguments.uids, in: id) }
    }
}

/// `mailslot group rename`.
struct GroupRename: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rename",
        abstract: "Rename GROUP to NAME (admins only; 1 to 128 bytes, no control characters).",
        discussion: GroupFields.changeHelp)
    @OptionGroup var options: GlobalOptions
    @Argument(help: "The group's id or name.") var group: String
    @Argument(help: "The new name.") var name: String

    func run() async throws {
        try await GroupFields.change(group, options: options) { client, id in try await client.rename(id, to: name) }
    }
}

/// `mailslot group leave`.
struct GroupLeave: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "leave",
        abstract: "Leave GROUP. Its last admin hands it to --successor UID (default: the remaining member with the smallest uid).",
        discussion: "The group then shows as left (`group list --all`), and later messages for it are refused (`mailslot rejected`: group_left). \(GroupFields.changeHelp) Leaving also prints successor: the member made admin because you were the last one (or null).")
    @OptionGroup var options: GlobalOptions
    @Argument(help: "The group's id or name.") var group: String
    @Option(help: ArgumentHelp("The member who becomes an admin when you are the last one.", valueName: "UID")) var successor: String?

    func run() async throws {
        try await reporting {
            if let successor, !Identifier.isValidUID(successor) { throw ClientError.invalidUID(text: successor) }
            let client = try Profile(options).client()
            let id = try await GroupFields.resolve(group, client: client)
            let before = try await client.group(id)
            let outcome = try await client.leave(id, successor: successor)
            let output = Output(json: options.json)
            // Which successor was chosen, when this user was the last admin: said, since it was not asked for.
            let named = outcome.group.admins.first { !before.admins.contains($0) }
            var fields = GroupFields.of(outcome.group)
            fields["successor"] = named ?? NSNull()
            fields["copies"] = GroupFields.copyFields(outcome.send)
            output.emit(fields, text: "left group \(outcome.group.name)" + (named.map { "; \($0) is now an admin" } ?? ""))
            try GroupFields.reportCopies(outcome.send, output: output, json: options.json)
        }
    }
}

/// `mailslot group list`.
struct GroupList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List the groups you are a member of, by name (--all: also those you left or were removed from).",
        discussion: "One line per group: id, name, members, your role or status.\n\n--json prints one object per group: \(GroupFields.help)")
    @OptionGroup var options: GlobalOptions
    @Flag(help: "Also list groups you left or were removed from.") var all = false

    func run() async throws {
        try await reporting {
            let client = try Profile(options).client()
            let output = Output(json: options.json)
            for group in try await client.groups() where all || group.status == .member {
                output.emit(GroupFields.of(group), text: "\(group.id)\t\(group.name)\t\(group.members.count) member(s)\t\(GroupFields.role(of: group))")
            }
        }
    }
}

/// `mailslot group show`.
struct GroupShow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show",
        abstract: "Show GROUP as this profile knows it: name, members, admins, version.",
        discussion: "--json prints one object: \(GroupFields.help)")
    @OptionGroup var options: GlobalOptions
    @Argument(help: "The group's id or name.") var group: String

    func run() async throws {
        try await reporting {
            let client = try Profile(options).client()
            let shown = try await client.group(try await GroupFields.resolve(group, client: client))
            Output(json: options.json).emit(GroupFields.of(shown), text: """
                \(shown.name) (\(shown.id))
                version \(shown.version); you: \(GroupFields.role(of: shown))
                admins: \(shown.admins.joined(separator: ", "))
                members: \(shown.members.joined(separator: ", "))
                """)
        }
    }
}

/// The group commands' shared parts: naming a group, its fields, a change's outcome.
enum GroupFields {
    /// The JSON fields of a group, for `--help` texts.
    static let help = """
        id, name, members (uids, sorted), admins (in seniority order: the creator first), version, status (member, left, \
        or removed — then by: the admin who removed you).
        """

    /// What every change command says about its output.
    static let changeHelp = """
        Prints `group NAME: version N`, then each member whose copy of the change was not sent, with why (exit codes: \
        `mailslot group --help`).

        --json prints one object: the group as `group show --json` prints it (\(help.dropLast())), and copies: [{to, \
        state (queued, refused, held), reason}] for the copies not sent.
        """

    /// `group`'s JSON fields (``help``).
    static func of(_ group: ChatGroup) -> [String: Any] {
        var fields: [String: Any] = ["id": group.id.rawValue, "name": group.name, "members": group.members,
                                     "admins": group.admins, "version": group.version]
        switch group.status {
        case .member: fields["status"] = "member"
        case .left: fields["status"] = "left"
        case .removed(let by): fields["status"] = "removed"; fields["by"] = by
        }
        return fields
    }

    /// This user's role or status in `group`, for people.
    static func role(of group: ChatGroup) -> String {
        switch group.status {
        case .member: group.isAdmin ? "admin" : "member"
        case .left: "left"
        case .removed(let by): "removed by \(by)"
        }
    }

    /// The group `text` names: a known group's id, or the one group of this profile with that
    /// name (a member's before a left one's). Unknown and ambiguous names are usage errors (64)
    /// listing the candidates.
    static func resolve(_ text: String, client: MailslotClient) async throws -> GroupID {
        let groups = try await client.groups()
        if let id = GroupID(rawValue: text), groups.contains(where: { $0.id == id }) { return id }
        var named = groups.filter { $0.name == text }
        if named.count > 1 { named = named.filter { $0.status == .member } }
        switch named.count {
        case 1: return named[0].id
        case 0:
            let known = groups.map { "\($0.id) \($0.name)" }
            throw CLIError.usage("no group '\(text)' in this profile" + (known.isEmpty ? " (it has none)" : "; its groups:\n  " + known.joined(separator: "\n  ")))
        default:
            let candidates = groups.filter { $0.name == text }.map { "\($0.id) \($0.name) (\(role(of: $0)))" }
            throw CLIError.usage("'\(text)' names \(candidates.count) groups: give the id of one:\n  " + candidates.joined(separator: "\n  "))
        }
    }

    /// Runs a change on the group `text` names and prints its outcome.
    static func change(_ text: String, options: GlobalOptions,
                       _ body: @Sendable (MailslotClient, GroupID) async throws -> GroupChangeOutcome) async throws {
        try await reportingFailures(as: { CLIError($0) }) {
            let client = try Profile(options).client()
            let outcome = try await body(client, try await resolve(text, client: client))
            let output = Output(json: options.json)
            var fields = of(outcome.group)
            fields["copies"] = copyFields(outcome.send)
            output.emit(fields, text: "group \(outcome.group.name): version \(outcome.group.version)")
            try reportCopies(outcome.send, output: output, json: options.json)
        }
    }

    /// The copies of `send` not sent, as JSON objects sorted by member.
    static func copyFields(_ send: GroupSendOutcome) -> [[String: Any]] {
        send.copies.sorted { $0.key < $1.key }.compactMap { member, copy in
            switch copy {
            case .sent: nil
            case .queued(_, let reason): ["to": member, "state": "queued", "reason": reason.description]
            case .refused(_, let reason): ["to": member, "state": "refused", "reason": reason.description]
            case .held: ["to": member, "state": "held", "reason": "key_changed"]
            }
        }
    }

    /// Says which copies of `send` were not sent, with why (a line per reason for people), and
    /// ends with the exit code of the most pressing one: 65 held for a changed key (someone must
    /// compare numbers), 69 refused by the relay, 75 queued. With `json` the line is left out:
    /// the caller's object carries the copies.
    static func reportCopies(_ send: GroupSendOutcome, output: Output, json: Bool) throws {
        let copies = send.copies.sorted { $0.key < $1.key }
        let held = copies.compactMap { member, copy in if case .held = copy { member } else { nil } }
        let refused = copies.compactMap { member, copy in if case .refused(_, let reason) = copy { "\(member) (\(reason))" } else { nil } }
        let queued = copies.compactMap { member, copy in if case .queued(_, let reason) = copy { "\(member) (\(reason))" } else { nil } }
        guard !(held.isEmpty && refused.isEmpty && queued.isEmpty) else { return }
        let sent = copies.count - held.count - refused.count - queued.count
        var parts = ["sent to \(sent) of \(copies.count)"]
        parts += held.map { "held for \($0) (key changed: compare `mailslot fingerprint \($0)`, then `mailslot trust \($0) --safety-number DIGITS` sends it)" }
        if !refused.isEmpty { parts.append("refused by the relay for " + refused.joined(separator: ", ")) }
        if !queued.isEmpty { parts.append("queued for " + queued.joined(separator: ", ") + ": `mailslot flush` retries") }
        let summary = parts.joined(separator: "; ")
        if !json { output.emit([:], text: summary) }
        if !held.isEmpty { throw CLIError.refused(summary) }
        if !refused.isEmpty { throw CLIError.unavailable(summary) }
        throw CLIError.queued(summary)
    }
}

extension Output {
    /// The JSON fields of a group event (``groupEvents(_:)``), for `--help` texts.
    static let eventFieldsHelp = """
        A group change prints one object per thing it did: event (created, added, removed, removed_you, promoted, demoted, \
        renamed, left), group {id, name}, by (the admin, or the member who left), members (for created, added, removed, \
        promoted, demoted), name (for created and renamed), version, standing (applied; late: it came after later changes, \
        the group was folded again; void: the group's rules did not apply it; waiting: an earlier change has not come yet), \
        id (the change's message id), timestamp.
        """

    /// A received group change, as the events it made (glib's ``GroupEvent``): one line each,
    /// `[Trip] · alice added dave`, or one JSON object each (``eventFieldsHelp``).
    func groupEvents(_ received: ReceivedMessage) {
        let when = Timestamp.format(received.message.timestamp / 1000)
        for event in received.events {
            var fields: [String: Any] = ["id": received.id, "by": event.author, "version": event.version, "timestamp": received.message.timestamp,
                                         "group": ["id": event.group.id.rawValue, "name": event.group.name], "standing": Self.standing(event.standing)]
            let did: String
            switch event.kind {
            case .created(let name, let members):
                fields["event"] = "created"; fields["name"] = name; fields["members"] = members
                did = "created the group with \(members.filter { $0 != event.author }.joined(separator: ", "))"
            case .added(let members): fields["event"] = "added"; fields["members"] = members; did = "added \(members.joined(separator: ", "))"
            case .removed(let members): fields["event"] = "removed"; fields["members"] = members; did = "removed \(members.joined(separator: ", "))"
            case .removedMe: fields["event"] = "removed_you"; did = "removed you"
            case .promoted(let members):
                fields["event"] = "promoted"; fields["members"] = members; did = "made \(members.joined(separator: ", ")) admin"
            case .demoted(let members):
                fields["event"] = "demoted"; fields["members"] = members; did = "made \(members.joined(separator: ", ")) a member (no longer admin)"
            case .renamed(let name): fields["event"] = "renamed"; fields["name"] = name; did = "renamed the group to \(name)"
            case .left: fields["event"] = "left"; did = "left"
            }
            let note = switch event.standing {
            case .applied: ""
            case .late: " (late: it came after later changes)"
            case .void: " (void: the group's rules did not apply it)"
            case .waiting: " (waiting for an earlier change)"
            }
            emit(fields, text: "[\(when)] [\(event.group.name)] · \(event.author) \(did)\(note)")
        }
    }

    /// A standing's JSON name.
    private static func standing(_ standing: GroupEvent.Standing) -> String {
        switch standing {
        case .applied: "applied"
        case .late: "late"
        case .void: "void"
        case .waiting: "waiting"
        }
    }
}
