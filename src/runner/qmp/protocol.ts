import { z } from 'zod';

/** The first line qemu sends on a QMP connection. */
export const qmpGreetingSchema = z.object({
  QMP: z.object({
    version: z.object({
      qemu: z.object({ major: z.number().int(), minor: z.number().int(), micro: z.number().int() }),
      package: z.string(),
    }),
    capabilities: z.array(z.string()),
  }),
});
export type QmpGreeting = z.infer<typeof qmpGreetingSchema>;

export const qmpEventSchema = z.object({
  event: z.string(),
  data: z.record(z.string(), z.unknown()).optional(),
  timestamp: z.object({ seconds: z.number(), microseconds: z.number() }),
});
export type QmpEvent = z.infer<typeof qmpEventSchema>;

// The client sends numeric ids only; a reply with any other id is not an answer to us.
const replyId = z.number().int();

export const qmpSuccessSchema = z.object({ return: z.json(), id: replyId.optional() });
export const qmpFailureSchema = z.object({
  error: z.object({ class: z.string(), desc: z.string() }),
  id: replyId.optional(),
});

/** Everything a QMP peer may send, tagged by kind. */
export const qmpMessageSchema = z.union([
  qmpGreetingSchema.transform((greeting) => ({ kind: 'greeting' as const, greeting })),
  qmpEventSchema.transform((event) => ({ kind: 'event' as const, event })),
  qmpSuccessSchema.transform(({ return: value, id }) => ({ kind: 'success' as const, id, value })),
  qmpFailureSchema.transform(({ error, id }) => ({ kind: 'failure' as const, id, error })),
]);
export type QmpMessage = z.infer<typeof qmpMessageSchema>;
