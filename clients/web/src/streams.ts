/**
 * The two halves of a session's resumable stream (§4): what this side sends, numbered
 * and kept until acknowledged, and what the server sent, deduplicated and acknowledged.
 * Neither reads a clock: `now` is an argument, in milliseconds.
 */

import { encode } from "./codec.js";
import { ACK_AFTER_MESSAGES, ACK_DELAY_MS, DEFAULT_MAX_KEPT, MAX_SEQ } from "./gen/protocol.js";
import type { ClientMessage } from "./messages.js";

/** Numbers, keeps and resends this side's sequenced messages (§4.1, §4.2, §5.4). */
export class OutgoingStream {
  lastSeq = 0;
  /** The highest seq dropped unacknowledged to respect maxKept; a resume needing it fails. */
  lostThrough = 0;
  private readonly kept: Array<[number, string]> = [];
  private head = 0;

  constructor(readonly maxKept: number = DEFAULT_MAX_KEPT) {
    if (maxKept < 1) throw new RangeError("maxKept must be at least 1");
  }

  get unacked(): number {
    return this.kept.length - this.head;
  }

  /** Number `message`, keep its text and return it for the wire. */
  send(message: ClientMessage): string {
    if (this.lastSeq >= MAX_SEQ) throw new Error(`seq ${MAX_SEQ} was sent; nothing more may be sent (§4.1)`);
    const seq = this.lastSeq + 1;
    const data = encode(message, seq);
    this.lastSeq = seq;
    if (this.unacked >= this.maxKept) this.lostThrough = this.kept[this.head++]![0];
    this.kept.push([seq, data]);
    this.compact();
    return data;
  }

  /** Discard every kept message with seq <= upTo (§4.2); beyond the last acknowledges all. */
  ack(upTo: number): void {
    while (this.head < this.kept.length && this.kept[this.head]![0] <= upTo) this.head++;
    this.compact();
  }

  /**
   * Every kept message with seq > resumedFrom, in order; null when that is impossible:
   * resumedFrom beyond what was sent, or a needed message was discarded (§5.4).
   */
  resendAfter(resumedFrom: number): string[] | null {
    if (resumedFrom < 0 || resumedFrom > this.lastSeq || resumedFrom < this.lostThrough) return null;
    const first = this.kept[this.head];
    if (resumedFrom < this.lastSeq && (first === undefined || first[0] > resumedFrom + 1)) return null;
    const out: string[] = [];
    for (let i = this.head; i < this.kept.length; i++) {
      const [seq, data] = this.kept[i]!;
      if (seq > resumedFrom) out.push(data);
    }
    return out;
  }

  private compact(): void {
    if (this.head > 64 && this.head * 2 > this.kept.length) {
      this.kept.splice(0, this.head);
      this.head = 0;
    }
  }
}

/** Tracks lastSeq of the server's stream, drops duplicates, schedules acks (§4.2, §4.3). */
export class IncomingStream {
  lastSeq = 0;
  /** How many times a seq skipped ahead; a conforming server never does (§4.3). */
  gaps = 0;
  private pending = 0;
  private dueAt: number | null = null;

  /** True when `seq` is new and must be handled; a duplicate is acknowledged again. */
  receive(seq: number, now: number): boolean {
    if (seq <= this.lastSeq) {
      this.schedule(now);
      return false;
    }
    if (seq !== this.lastSeq + 1) this.gaps++;
    this.lastSeq = seq;
    this.pending++;
    this.schedule(now);
    return true;
  }

  /** When the next ack is due, or null when nothing waits for one. */
  ackDeadline(): number | null {
    if (this.dueAt === null) return null;
    return this.pending >= ACK_AFTER_MESSAGES ? -Infinity : this.dueAt;
  }

  /** upTo for an ack to send now, if one is due. */
  takeAck(now: number): number | null {
    const deadline = this.ackDeadline();
    if (deadline === null || now < deadline) return null;
    this.pending = 0;
    this.dueAt = null;
    return this.lastSeq;
  }

  private schedule(now: number): void {
    if (this.dueAt === null) this.dueAt = now + ACK_DELAY_MS;
  }
}
