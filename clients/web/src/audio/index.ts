/**
 * vrealtime/audio: the microphone and the speaker of a {@link VrtClient}.
 *
 *     const context = new AudioContext({ latencyHint: "interactive" }); // after a user gesture
 *     const speaker = await Speaker.start(client, context);   // plays output audio, reports playback
 *     const microphone = await Microphone.start(client, context, { mode: "always" });
 *
 * Capture runs in an AudioWorklet: the device's samples are resampled to the session's
 * input format (pcm16 at its rate, 24 kHz by default, or pcmu at 8 kHz) and sent as
 * 20 ms frames with the §8.1 header. Playback runs in another AudioWorklet behind a
 * jitter buffer; on `playbackStop` (an interruption, or the user speaking, §8.4) it
 * stops before the next render quantum and the speaker reports, per item, the
 * milliseconds the worklet actually wrote to the output: the audio clock's count, not
 * what was received. Opus goes through WebCodecs where the browser has it.
 */

import type { VrtClient } from "../client.js";
import type { Format } from "../messages.js";
import { formatRate } from "../messages.js";
import { pcm16ToFloat, pcmuToFloat } from "./pcm.js";

export { muLawDecode, muLawEncode, floatToPcm16, floatToPcmu, pcm16ToFloat, pcmuToFloat, Resampler } from "./pcm.js";

declare const __CAPTURE_WORKLET__: string;
declare const __PLAYBACK_WORKLET__: string;

export const FRAME_MS = 20;
const PCM16_24K: Format = { encoding: "pcm16", sampleRate: 24000 };
const OPUS: Format = { encoding: "opus", sampleRate: 48000 };

const loaded = new WeakMap<BaseAudioContext, Promise<void>>();

/** Load both worklets into `context` once (they are inlined in this module, no extra file). */
export function loadWorklets(context: BaseAudioContext): Promise<void> {
  let promise = loaded.get(context);
  if (promise === undefined) {
    const url = URL.createObjectURL(new Blob([__CAPTURE_WORKLET__, "\n", __PLAYBACK_WORKLET__], { type: "text/javascript" }));
    promise = context.audioWorklet.addModule(url).finally(() => URL.revokeObjectURL(url));
    loaded.set(context, promise);
  }
  return promise;
}

/** Whether this browser can encode and decode Opus with WebCodecs. */
export async function opusSupported(): Promise<boolean> {
  if (typeof AudioEncoder === "undefined" || typeof AudioDecoder === "undefined") return false;
  try {
    const config = { codec: "opus", sampleRate: 48000, numberOfChannels: 1 };
    const [encoder, decoder] = await Promise.all([AudioEncoder.isConfigSupported(config), AudioDecoder.isConfigSupported(config)]);
    return Boolean(encoder.supported && decoder.supported);
  } catch {
    return false;
  }
}

/**
 * Formats to prefer in `hello.input` / `hello.output` (§8.2): Opus when asked for and
 * this browser has WebCodecs Opus (declared only then), else pcm16 at 24 kHz, which
 * every server must accept.
 */
export async function preferredFormats(options: { opus?: boolean } = {}): Promise<{ input: Format; output: Format }> {
  const format = options.opus && (await opusSupported()) ? OPUS : PCM16_24K;
  return { input: format, output: format };
}

/** Converts context time to `performance.now()` time, through the output timestamp. */
export function contextToPerformance(context: AudioContext, contextTime: number): number {
  const stamp = context.getOutputTimestamp();
  if (stamp.contextTime === undefined || stamp.performanceTime === undefined || stamp.performanceTime === 0) {
    return performance.now() - (context.currentTime - contextTime) * 1000;
  }
  return stamp.performanceTime + (contextTime - stamp.contextTime) * 1000;
}

// --- speaker ---------------------------------------------------------------------------

export interface SpeakerOptions {
  /** Audio queued before playback starts, and after an underrun (default 60 ms). */
  jitterMs?: number;
  /** Where the audio goes (default the context's destination). */
  destination?: AudioNode;
  /** Called when an item's first sample is written, with the time in `performance.now()` terms. */
  onStarted?: (itemId: string, performanceTime: number) => void;
  /** Called after each stop with what was reported per item (§8.4). */
  onStopped?: (played: Array<{ itemId: string; playedMs: number }>) => void;
}

/** Plays a client's output audio and reports what was heard (§8.3, §8.4). */
export class Speaker {
  readonly node: AudioWorkletNode;
  /** Milliseconds written to the output per item since the last stop, from the last report. */
  private pending = new Map<number, (played: Array<{ itemId: string; playedMs: number }>) => void>();
  private nextId = 1;
  private decoder: AudioDecoder | null = null;
  private decoding: string[] = [];
  private readonly listeners: Array<[string, EventListener]> = [];

  private constructor(
    readonly client: VrtClient,
    readonly context: AudioContext,
    private readonly options: SpeakerOptions,
  ) {
    this.node = new AudioWorkletNode(context, "vrt-playback", {
      numberOfInputs: 0,
      outputChannelCount: [context.destination.channelCount >= 2 ? 2 : 1],
      processorOptions: { jitterMs: options.jitterMs ?? 60 },
    });
    this.node.connect(options.destination ?? context.destination);
    this.node.port.onmessage = (event: MessageEvent) => this.fromWorklet(event.data as Record<string, unknown>);
    this.listen("audio", (e) => this.play(e.detail.itemId, e.detail.payload));
    this.listen("playbackStop", () => void this.stop());
  }

  /** Start playing `client`'s output audio through `context` (create it after a user gesture). */
  static async start(client: VrtClient, context: AudioContext, options: SpeakerOptions = {}): Promise<Speaker> {
    await loadWorklets(context);
    return new Speaker(client, context, options);
  }

  /**
   * Stop at once, drop what is buffered, and send `playback` for each item that had
   * audio since the last stop, with the milliseconds written to the output (§8.4).
   * The session calls this on every `playbackStop`; call it yourself for a local stop.
   */
  async stop(): Promise<Array<{ itemId: string; playedMs: number }>> {
    this.decoding = [];
    const played = await this.ask("stop");
    const session = this.client.session;
    for (const { itemId, playedMs } of played) {
      if (session !== undefined && session.state !== "closed") this.client.playback(itemId, playedMs);
    }
    this.options.onStopped?.(played);
    return played;
  }

  /** Milliseconds written to the output per item since the last stop, without stopping. */
  report(): Promise<Array<{ itemId: string; playedMs: number }>> {
    return this.ask("report");
  }

  /** Disconnect from the client and the audio graph. */
  close(): void {
    for (const [type, listener] of this.listeners) this.client.removeEventListener(type, listener);
    this.node.port.postMessage({ type: "close" });
    this.node.disconnect();
    this.decoder?.close();
  }

  private listen<K extends "audio" | "playbackStop">(type: K, handler: (e: CustomEvent<any>) => void): void {
    const listener = handler as EventListener;
    this.client.addEventListener(type, listener);
    this.listeners.push([type, listener]);
  }

  private ask(type: "stop" | "report"): Promise<Array<{ itemId: string; playedMs: number }>> {
    const id = this.nextId++;
    return new Promise((resolve) => {
      this.pending.set(id, resolve);
      this.node.port.postMessage({ type, id });
    });
  }

  private fromWorklet(message: Record<string, unknown>): void {
    if (message["type"] === "started") {
      this.options.onStarted?.(message["itemId"] as string, contextToPerformance(this.context, message["time"] as number));
    } else {
      const resolve = this.pending.get(message["id"] as number);
      this.pending.delete(message["id"] as number);
      resolve?.(message["played"] as Array<{ itemId: string; playedMs: number }>);
    }
  }

  private play(itemId: string, payload: Uint8Array): void {
    const format = this.client.session.output;
    if (format === null || payload.length === 0) return;
    if (format.encoding === "opus") {
      this.decodeOpus(itemId, payload);
      return;
    }
    const samples = format.encoding === "pcmu" ? pcmuToFloat(payload) : pcm16ToFloat(payload);
    this.push(itemId, formatRate(format), samples);
  }

  private push(itemId: string, rate: number, samples: Float32Array): void {
    this.node.port.postMessage({ type: "push", itemId, rate, samples }, [samples.buffer]);
  }

  private decodeOpus(itemId: string, packet: Uint8Array): void {
    if (this.decoder === null) {
      this.decoder = new AudioDecoder({
        output: (data) => {
          const item = this.decoding.shift();
          const samples = new Float32Array(data.numberOfFrames);
          data.copyTo(samples, { planeIndex: 0, format: "f32-planar" });
          if (item !== undefined) this.push(item, data.sampleRate, samples);
          data.close();
        },
        error: () => {
          this.decoder = null;
          this.decoding = [];
        },
      });
      this.decoder.configure({ codec: "opus", sampleRate: 48000, numberOfChannels: 1 });
    }
    this.decoding.push(itemId);
    this.decoder.decode(new EncodedAudioChunk({ type: "key", timestamp: 0, data: packet }));
  }
}

// --- microphone ------------------------------------------------------------------------

export interface MicrophoneOptions {
  /** `always`: every frame is sent. `push-to-talk`: only while {@link Microphone.talking} is true. */
  mode?: "always" | "push-to-talk";
  /** Silence sent after push-to-talk is released, so the server's VAD hears the end (default 500 ms). */
  tailMs?: number;
  /** getUserMedia constraints; the default asks for echo cancellation, noise suppression and gain control. */
  constraints?: MediaTrackConstraints;
  /** An existing stream instead of getUserMedia. */
  stream?: MediaStream;
  /** Called for every frame captured: its level (RMS, 0..1), whether it was sent, and when its last sample was captured (`performance.now()` terms). */
  onFrame?: (frame: { level: number; sent: boolean; capturedAt: number; bytes: number }) => void;
}

/** Sends the microphone to a client as 20 ms frames of its session's input format (§8.1, §8.2). */
export class Microphone {
  readonly node: AudioWorkletNode;
  private talkingNow: boolean;
  private encoder: AudioEncoder | null = null;
  private opusTimestamp = 0;

  private constructor(
    readonly client: VrtClient,
    readonly context: AudioContext,
    readonly stream: MediaStream,
    private readonly source: MediaStreamAudioSourceNode,
    private readonly options: MicrophoneOptions,
  ) {
    const format = client.session.input ?? PCM16_24K;
    const encoding = format.encoding === "opus" ? "float" : format.encoding;
    this.node = new AudioWorkletNode(context, "vrt-capture", {
      numberOfInputs: 1,
      numberOfOutputs: 0,
      channelCount: 1,
      channelCountMode: "explicit",
      processorOptions: { rate: formatRate(format), encoding, frameMs: FRAME_MS },
    });
    if (format.encoding === "opus") this.encoder = this.opusEncoder();
    source.connect(this.node);
    this.talkingNow = (options.mode ?? "always") === "always";
    if (!this.talkingNow) this.node.port.postMessage({ type: "mute", tailMs: 0 });
    this.node.port.onmessage = (event: MessageEvent) => this.frame(event.data as { data: Uint8Array | Float32Array; time: number; level: number });
  }

  /**
   * Capture from the microphone into `client`, which must be connected (its `ready`
   * fixed the input format). Asks for permission unless `options.stream` is given.
   */
  static async start(client: VrtClient, context: AudioContext, options: MicrophoneOptions = {}): Promise<Microphone> {
    if (client.session?.input === null || client.session === undefined) throw new Error("connect the client first: its ready fixes the input format");
    const [stream] = await Promise.all([
      options.stream ??
        navigator.mediaDevices.getUserMedia({
          audio: options.constraints ?? { echoCancellation: true, noiseSuppression: true, autoGainControl: true, channelCount: 1 },
        }),
      loadWorklets(context),
    ]);
    return new Microphone(client, context, stream, context.createMediaStreamSource(stream), options);
  }

  /** Push-to-talk: whether the user holds the button. Releasing it trails `tailMs` of silence. */
  get talking(): boolean {
    return this.talkingNow;
  }

  set talking(value: boolean) {
    if (value === this.talkingNow) return;
    this.talkingNow = value;
    this.node.port.postMessage(value ? { type: "unmute" } : { type: "mute", tailMs: this.options.tailMs ?? 500 });
  }

  /** Stop capturing and release the microphone (when this class asked for it). */
  stop(): void {
    this.node.port.postMessage({ type: "stop" });
    this.source.disconnect();
    this.node.disconnect();
    if (this.options.stream === undefined) for (const track of this.stream.getTracks()) track.stop();
    if (this.encoder !== null && this.encoder.state !== "closed") this.encoder.close();
  }

  private frame(message: { data: Uint8Array | Float32Array; time: number; level: number }): void {
    // The render clock (currentTime) runs ahead of the output by the output latency:
    // a capture time maps through it, not through the output timestamp.
    const capturedAt = performance.now() - (this.context.currentTime - message.time) * 1000;
    if (message.data instanceof Float32Array) {
      this.encodeOpus(message.data);
      this.options.onFrame?.({ level: message.level, sent: this.client.connected, capturedAt, bytes: 0 });
      return;
    }
    const sent = this.client.connected && this.client.sendAudio(message.data);
    this.options.onFrame?.({ level: message.level, sent, capturedAt, bytes: message.data.length });
  }

  private opusEncoder(): AudioEncoder {
    const encoder = new AudioEncoder({
      output: (chunk) => {
        const packet = new Uint8Array(chunk.byteLength);
        chunk.copyTo(packet);
        if (this.client.connected) this.client.sendAudio(packet); // one Opus packet per frame (§8.2)
      },
      error: (error) => console.error("vrealtime: Opus encoder failed", error),
    });
    encoder.configure({ codec: "opus", sampleRate: 48000, numberOfChannels: 1, opus: { frameDuration: FRAME_MS * 1000 } } as AudioEncoderConfig);
    return encoder;
  }

  private encodeOpus(samples: Float32Array): void {
    const encoder = this.encoder;
    if (encoder === null || encoder.state !== "configured") return;
    const data = new AudioData({ format: "f32-planar", sampleRate: 48000, numberOfFrames: samples.length, numberOfChannels: 1, timestamp: this.opusTimestamp, data: samples as Float32Array<ArrayBuffer> });
    this.opusTimestamp += (samples.length * 1e6) / 48000;
    encoder.encode(data);
    data.close();
  }
}
