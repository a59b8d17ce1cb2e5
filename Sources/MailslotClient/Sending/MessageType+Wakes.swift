import MailslotWire

extension MessageType {
    /// Whether a message of this type may wake its recipient's devices (spec/push.md §3): not a
    /// typing indicator nor a receipt — a phone is woken for something a person wrote, as every
    /// messenger does. The client sends their creates with `"wake": false`.
    public var wakes: Bool { self != .typing && self != .receipt }
}
