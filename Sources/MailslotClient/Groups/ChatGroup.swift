import Foundation
import GRDB
import MailslotWire

/// A group as this device folded it (spec/groups.md §1–§3): its name, members and admins at its
/// latest version, and whether this user is still in it.
///
/// Named `ChatGroup`, not `Group`: SwiftUI has a `Group`, and an app imports both.
public struct ChatGroup: Sendable, Equatable, Identifiable {
    /// Where this user stands in the group.
    public enum Status: Sendable, Equatable {
        /// A member of the folded state.
        case member
        /// An admin's change removed this user (`by` is that admin): the group shows as left, and
        /// later messages for it are refused (`group_left`).
        case removed(by: String)
        /// This user left it.
        case left
    }

    /// The group's id.
    public let id: GroupID
    /// Its name (a label chosen by an admin: show it sanitised).
    public let name: String
    /// Its members' uids, in UTF-8 byte order.
    public let members: [String]
    /// Its admins' uids in seniority order: the creator first, then in the order promoted.
    public let admins: [String]
    /// The version of the folded state.
    public let version: UInt64
    /// Where this user stands in it.
    public let status: Status
    /// The user this client signed in as, to answer ``isAdmin``.
    let me: String

    /// Whether this user is an admin of it.
    public var isAdmin: Bool { status == .member && admins.contains(me) }

    init(_ state: GroupState, status: Status, me: String) {
        id = state.id
        name = state.name
        members = state.members
        admins = state.admins
        version = state.version
        self.status = status
        self.me = me
    }
}

/// Which group a received message was sent to, as this device knows it when it was accepted.
public struct GroupContext: Sendable, Equatable {
    /// The group's id.
    public let id: GroupID
    /// Its name, at the time.
    public let name: String
    /// The version of the sender's state the message named.
    public let version: UInt64
}

/// What happened to one message sent to a group: one message id for every copy, and each
/// member's copy's outcome (the outcomes of issue 28's ``MailslotClient/SendOutcome``).
public struct GroupSendOutcome: Sendable, Equatable {
    /// The message id, the same in every member's mailbox.
    public let messageID: String
    /// Each member's copy (this user excluded): ``MailslotClient/SendOutcome/sent(id:)``,
    /// ``MailslotClient/SendOutcome/queued(id:reason:)`` (``MailslotClient/flush()`` retries it),
    /// ``MailslotClient/SendOutcome/held(id:recipient:)`` (the member's identity key changed: sent
    /// once trusted) or ``MailslotClient/SendOutcome/refused(id:reason:)``. A copy to someone the
    /// group no longer has is dropped and absent.
    public let copies: [String: MailslotClient.SendOutcome]

    /// Whether the relay stored every copy.
    public var allSent: Bool { copies.values.allSatisfy { if case .sent = $0 { true } else { false } } }
}

/// What an admin's (or a leaving member's) change came to: the group as this device folds it
/// now, and the outcome of the change's copies to the members, old and new.
public struct GroupChangeOutcome: Sendable, Equatable {
    /// The group after the change.
    public let group: ChatGroup
    /// The change's copies.
    public let send: GroupSendOutcome
}

extension ClientStore {
    /// The group context of a stored group message (nil for a 1:1 message).
    static func groupContext(of message: ChatMessage, _ db: Database) throws -> GroupContext? {
        guard let reference = message.group else { return nil }
        let name = try group(reference.id.rawValue, db).flatMap { try? GroupState.decode(folded: $0.state).name } ?? ""
        return GroupContext(id: reference.id, name: name, version: reference.version)
    }
}
