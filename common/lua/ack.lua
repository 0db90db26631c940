#!lua flags=allow-oom
-- ack: ARGV cid, owner, then id, epoch, task, seq of each batch
-- acknowledged. Forgets every one of them that the consumer still held
-- (one whose lease ran out and that went to another consumer is left
-- alone) and sets its bit in the acknowledgement bitmap of its epoch and
-- task (a seq above 16777215 is no batch id: valid_id); returns how many
-- it forgot. owner is '' for a consumer without checkpoints; else the
-- frames are kept for owner's checkpoints (lib.lua: retain), and a few
-- frames of its dropped checkpoints are forgotten.
--! include lib
local nq = noqueue() if nq then return nq end
local pending = pre .. 'pending:' .. ARGV[1]
local owner = ARGV[2]
local keys, ids, sizes, ep = {}, {}, {}, {}
local n, bytes = 0, 0
-- Bits to set, one BITFIELD per run of one task's batches.
local bm, set, c = nil, nil, 0
local function flush_bits()
  if c > 0 then
    redis.call('BITFIELD', bm, unpack(set))
    redis.call('SADD', pre .. 'bitmaps', bm)
  end
end
-- Acks come in the order the batches were taken, which is the order of
-- the pending list from its end: when the ids are exactly the list's last
-- entries, one LTRIM drops them all; otherwise each is looked for (LREM).
local function seq_ok(i) return (tonumber(ARGV[i + 3]) or math.huge) <= 16777215 end
local k = (#ARGV - 2) / 4
local all = k >= 1 and k == math.floor(k)
if all then
  local tail = redis.call('LRANGE', pending, -k, -1)
  all = #tail == k
  -- The tail backwards, usually (the newest entry is the list's first);
  -- else the same ids in another order.
  local j = k
  for i = 3, #ARGV, 4 do
    if not all or tail[j] ~= ARGV[i] then break end
    all, j = seq_ok(i), j - 1
  end
  if all and j > 0 then
    local left = {}
    for _, id in ipairs(tail) do left[id] = (left[id] or 0) + 1 end
    for i = 3, #ARGV, 4 do
      local id = ARGV[i]
      if not left[id] or left[id] == 0 or not seq_ok(i) then
        all = false
        break
      end
      left[id] = left[id] - 1
    end
  end
  if all then redis.call('LTRIM', pending, 0, -k - 1) end
end
local laste, lastt
for i = 3, #ARGV, 4 do
  local id, e, t = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if all or (seq_ok(i) and redis.call('LREM', pending, '-1', id) == 1) then
    n = n + 1
    keys[n], ids[n] = pre .. 'b:' .. id, id
    sizes[n] = redis.call('STRLEN', keys[n])
    bytes = bytes + sizes[n]
    if e ~= laste or t ~= lastt then
      flush_bits()
      laste, lastt = e, t
      bm, set, c = pre .. 'acked:' .. e .. ':' .. t, {}, 0
    end
    set[c + 1], set[c + 2], set[c + 3], set[c + 4] = 'SET', 'u1', ARGV[i + 3], '1'
    c = c + 4
    ep[e] = (ep[e] or 0) + 1
  end
end
if n == 0 then return 0 end
flush_bits()
if owner == '' then
  redis.call('UNLINK', unpack(keys))
else
  for k, id in ipairs(ids) do retain(id, sizes[k], owner) end
  ckpt_trim(owner, 64)
end
redis.call('HDEL', pre .. 'dlv', unpack(ids))
redis.call('DECRBY', pre .. 'bytes', bytes)
redis.call('HINCRBY', pre .. 'stats', 'acked', n)
redis.call('HINCRBY', pre .. 'stats', 'acked_bytes', bytes)
for e, k in pairs(ep) do
  redis.call('HINCRBY', pre .. 'estats', e .. ':acked', k)
end
wake_producers()
final_if_drained()
return n
