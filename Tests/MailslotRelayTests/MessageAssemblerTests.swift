import NIOCore
import Testing
@testable import MailslotRelay

/// Client messages are put together from their frames within bounds of bytes and fragments.
@Suite struct MessageAssemblerTests {
    private func buffer(_ text: String) -> ByteBuffer { ByteBuffer(string: text) }

    @Test func aMessageInOneFrameOrInSeveralComesOutWhole() throws {
        var assembler = MessageAssembler(maxBytes: 64, maxFragments: 4)
        #expect(try assembler.add(opcode: .text, data: buffer(#"{"type":"ack"}"#), fin: true) == .text(#"{"type":"ack"}"#))
        #expect(try assembler.add(opcode: .text, data: buffer(#"{"type""#), fin: false) == nil)
        #expect(try assembler.add(opcode: .continuation, data: buffer(#":"#), fin: false) == nil)
        #expect(try assembler.add(opcode: .continuation, data: buffer(#""ack"}"#), fin: true) == .text(#"{"type":"ack"}"#))
        #expect(try assembler.add(opcode: .binary, data: buffer("xy"), fin: false) == nil)
        #expect(try assembler.add(opcode: .continuation, data: buffer("z"), fin: true) == .binary)
        // The final fragment may be empty; the message is what came before it.
        #expect(try assembler.add(opcode: .text, data: buffer("ab"), fin: false) == nil)
        #expect(try assembler.add(opcode: .continuation, data: ByteBuffer(), fin: true) == .text("ab"))
    }

    @Test func anEmptyFragmentThatIsNotTheLastIsRefused() throws {
        var assembler = MessageAssembler(maxBytes: 1 << 20, maxFragments: 1 << 20)
        _ = try assembler.add(opcode: .text, data: buffer("{"), fin: false)
        #expect(throws: MessageAssembler.Violation.emptyFragment) { try assembler.add(opcode: .continuation, data: ByteBuffer(), fin: false) }
        var other = MessageAssembler(maxBytes: 64, maxFragments: 4)
        #expect(throws: MessageAssembler.Violation.emptyFragment) { try other.add(opcode: .text, data: ByteBuffer(), fin: false) }
        #expect(MessageAssembler.Violation.emptyFragment.closeCode == .policyViolation)
    }

    @Test func tooManyFragmentsOrTooManyBytesAreRefusedAsTooLarge() throws {
        var fragmented = MessageAssembler(maxBytes: 1024, maxFragments: 3)
        _ = try fragmented.add(opcode: .text, data: buffer("a"), fin: false)
        _ = try fragmented.add(opcode: .continuation, data: buffer("b"), fin: false)
        _ = try fragmented.add(opcode: .continuation, data: buffer("c"), fin: false)
        #expect(throws: MessageAssembler.Violation.tooManyFragments) { try fragmented.add(opcode: .continuation, data: buffer("d"), fin: true) }

        var large = MessageAssembler(maxBytes: 8, maxFragments: 16)
        _ = try large.add(opcode: .text, data: buffer("12345"), fin: false)
        #expect(throws: MessageAssembler.Violation.tooLarge) { try large.add(opcode: .continuation, data: buffer("6789"), fin: true) }
        var single = MessageAssembler(maxBytes: 8, maxFragments: 16)
        #expect(throws: MessageAssembler.Violation.tooLarge) { try single.add(opcode: .text, data: buffer("123456789"), fin: true) }
        #expect(MessageAssembler.Violation.tooLarge.closeCode == .messageTooLarge)
        #expect(MessageAssembler.Violation.tooManyFragments.closeCode == .messageTooLarge)
    }

    @Test func fragmentsOutOfSequenceAreAProtocolError() throws {
        var assembler = MessageAssembler(maxBytes: 64, maxFragments: 4)
        #expect(throws: MessageAssembler.Violation.outOfSequence) { try assembler.add(opcode: .continuation, data: buffer("x"), fin: true) }
        var interleaved = MessageAssembler(maxBytes: 64, maxFragments: 4)
        _ = try interleaved.add(opcode: .text, data: buffer("x"), fin: false)
        #expect(throws: MessageAssembler.Violation.outOfSequence) { try interleaved.add(opcode: .text, data: buffer("y"), fin: true) }
    }
}
