-- Shared helpers, included by the scripts that need them. KEYS[1] is a key
-- of queue Q the caller's role may write, "sluice:{Q}:<anchor>" (meta for
-- the admin, producers for a producer, consumers for a consumer: Redis
-- checks the keys EVALSHA names against the caller's ACL, for reading and
-- writing); every key is derived from its prefix "sluice:{Q}:".
local pre = string.match(KEYS[1], '^sluice:{[^}]*}:')
local meta = pre .. 'meta'
local job = pre .. 'job'
-- The job's progress (epoch_open, state, twaiting, tscan, final_pending),
-- which producers and consumers write; job holds what the admin submitted.
local jrun = pre .. 'jrun'
-- Who runs the script: 'producers' for a producer, whose ACL role may
-- create frames (b:) but neither overwrite nor delete one (docs/DEPLOY.md,
-- "Roles"); 'consumers' or 'meta' otherwise.
local caller = string.sub(KEYS[1], #pre + 1)
-- Redis Cluster: while the queue's slot migrates, this fails (the guard
-- key never exists) before the script writes anything, so a script sent
-- again once the slot has moved never ran half. Otherwise it says whether
-- the queue exists.
local queue_exists = redis.call('EXISTS', meta, pre .. 'guard') > 0

-- The error a script returns on a queue that does not exist (or whose
-- delete is under way), else nil.
local function noqueue()
  if not queue_exists then return redis.error_reply('NOQUEUE no such queue') end
  return nil
end

-- dlv's field '~' is not a batch: its value, longer than 64 bytes, keeps
-- the hash in Redis's hashtable encoding. In the compact encoding (a
-- listpack, Redis's default up to 128 fields of up to 64 bytes) every
-- field looked up, set or deleted is a scan of the whole hash, and the
-- queue's scripts look up, set and delete one field per batch. push sets
-- it; a queue's dlv has it from its first push on.
-- held_count() is the number of batches the queue holds: dlv's fields
-- but the pin.
local DLV_PIN = '~'
local function held_count()
  local dlv = pre .. 'dlv'
  return redis.call('HLEN', dlv) - redis.call('HEXISTS', dlv, DLV_PIN)
end

-- The server's clock in milliseconds. Leases, heartbeats and their expiry
-- use it and never a client's clock (scripts are replicated by their
-- effects, so TIME is allowed).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The server's run_id (it changes when Redis restarts, or a replica takes
-- over: writes it had acknowledged may be gone), or nil when the ACL
-- refuses INFO.
local function run_id()
  local info = redis.pcall('INFO', 'server')
  return type(info) == 'string' and string.match(info, 'run_id:(%x+)') or nil
end

local function wake_producers()
  redis.call('LPUSH', pre .. 'room', '1')
  redis.call('LTRIM', pre .. 'room', '0', '15')
end

local function wake_task_waiters()
  redis.call('LPUSH', pre .. 'task_wake', 1)
  redis.call('LTRIM', pre .. 'task_wake', 0, 15)
end

-- The list a batch of epoch e waits in: one per epoch, or one per epoch
-- and rank in a coordinated queue.
local function ready_key(e, rank)
  if rank and rank ~= '' then
    return pre .. 'ready:' .. e .. ':' .. rank
  end
  return pre .. 'ready:' .. e
end

-- The waiting tasks of epoch e, claimed from the left.
local function tasks_key(e)
  return pre .. 'tasks:' .. e
end

-- The room rule: whether a queue that holds count batches of used bytes
-- has room for one more batch of size bytes within its budgets, maxn
-- batches and maxb bytes (meta max_batches, max_bytes). ahead: the batch is
-- of an epoch the trainers have not reached, which gets 3/4 of each budget
-- (at least one batch), so that a task of the current epoch that must be
-- redone finds room. task_claim asks it for a batch of one byte; push
-- holds a copy (it runs standalone, without lib: keep the two the same);
-- so does a producer probing other partitions (producer/src/room.c,
-- sluicei_room_ahead), with ahead.
local function has_room(count, used, size, maxn, maxb, ahead)
  if ahead then
    maxn = math.max(1, math.floor(maxn * 3 / 4))
    maxb = math.floor(maxb * 3 / 4)
  end
  return count + 1 <= maxn and used + size <= maxb
end

-- A batch id "epoch:task:seq" in canonical decimal (a padding copy ends in
-- ":pad<k>"), epoch < 2^32, task < 2^64, seq <= 16777215 (the bit of seq
-- in an acknowledgement bitmap: a larger seq would make it huge).
local function valid_id(s)
  if #s > 64 then return false end
  local e, t, q, rest = string.match(s, '^(%d+):(%d+):(%d+)(.*)$')
  if not e or (rest ~= '' and not string.match(rest, '^:pad[1-9]%d?%d?%d?%d?%d?$')) then
    return false
  end
  for _, d in ipairs({e, t, q}) do
    if #d > 1 and string.sub(d, 1, 1) == '0' then return false end
  end
  return #e <= 10 and tonumber(e) <= 4294967295 and #q <= 8 and tonumber(q) <= 16777215 and
         (#t < 20 or (#t == 20 and t <= '18446744073709551615'))
end

-- Next() marks a batch it hands to the application with this expiry of
-- its frame (PEXPIREAT b:<id>, the year 9999: it never fires). The mark
-- goes with the frame when the batch is acknowledged, and give_back
-- clears it: only a batch an application received counts a delivery.
local function handed(id)
  return redis.call('PTTL', pre .. 'b:' .. id) > 0
end

-- Removes a batch from the queue (frame, delivery count, byte budget).
local function forget(id)
  local b = pre .. 'b:' .. id
  local size = redis.call('STRLEN', b)
  redis.call('UNLINK', b)
  redis.call('HDEL', pre .. 'dlv', id)
  redis.call('DECRBY', pre .. 'bytes', size)
  return size
end

-- Forgets up to max batches of the last rounds that coordinated epochs
-- ended by a producer dropped (epoch_end); returns how many.
local function forget_dropped(max)
  local ids = redis.call('LPOP', pre .. 'dropped', max)
  if not ids then return 0 end
  for _, id in ipairs(ids) do forget(id) end
  return #ids
end

-- Moves a batch (or anything found where a batch id belongs) to the
-- dead-letter list with its reason, intact; a frame is kept as deadb:<id>.
local function dead_letter(id, reason, now)
  local b = pre .. 'b:' .. id
  local size = 0
  if redis.call('HEXISTS', pre .. 'dlv', id) == 1 and redis.call('EXISTS', b) == 1 then
    size = redis.call('STRLEN', b)
    redis.call('RENAME', b, pre .. 'deadb:' .. id)
    redis.call('PERSIST', pre .. 'deadb:' .. id)
    redis.call('HDEL', pre .. 'dlv', id)
    redis.call('DECRBY', pre .. 'bytes', size)
  end
  redis.call('RPUSH', pre .. 'dead', id)
  redis.call('HSET', pre .. 'deadinfo', id, size .. ' ' .. now .. ' ' .. reason)
  redis.call('HINCRBY', pre .. 'stats', 'dead', '1')
  wake_producers()
end

-- The epoch whose end marker s ("eof:<e>") is, or nil.
local function marker_epoch(s)
  local e = string.match(s, '^eof:(%d+)$')
  if e and #e <= 10 and (#e == 1 or string.sub(e, 1, 1) ~= '0') then return e end
  return nil
end

-- Whether s is the end marker of epoch e and that end was really posted.
local function true_marker(s, e)
  return s == 'eof:' .. e and redis.call('HEXISTS', pre .. 'eof', e) == 1
end

-- Where a batch handed back goes: the list of its own epoch, in front of
-- that epoch's end marker, even when the end is posted: a consumer still
-- in that epoch (or one resuming a checkpoint taken in it) gets it there,
-- before the end, and one that passed it takes it from there at its next
-- take (take.lua looks into the lists of the 16 epochs before its own).
-- Only a batch of an epoch more than 16 behind the first open one goes to
-- the first open epoch (late, its delivery count showing a redelivery).
local function requeue_list(id, rank)
  local e = string.match(id, '^(%d+):')
  local open = redis.call('HGET', jrun, 'epoch_open')
  if not e then
    e = open or '0'
  elseif open and tonumber(e) < tonumber(open) - 16 then
    local last = tonumber(redis.call('HGET', job, 'epochs')) - 1
    e = tostring(math.min(tonumber(open), last))
  end
  return ready_key(e, rank)
end

local function lease_ms()
  return tonumber(redis.call('HGET', meta, 'lease_ms') or '10000')
end

local function max_deliveries()
  return tonumber(redis.call('HGET', meta, 'max_deliveries') or '0')
end

-- Notices a restart of Redis (or a replica that took over): its run_id is
-- not the one the queue saw last. It may have lost its last writes,
-- acknowledgements among them, which only the consumers' restores
-- (restore.lua) can put back: takes wait (take.lua: RECOVERING) 3 s (a
-- consumer's longest backoff between reconnects is 2.5 s: one it did not
-- know is back by then) and until every consumer it knew, whose lease ran
-- when it last heard of anyone, has restored, or its lease plus 2.5 s
-- have passed. And whatever appendfsync says, the marks of what the
-- applications received (handed) that were on their way went with the
-- connections: no reply confirms a mark. So every consumer registered
-- then is unsure until it restores, which marks again what its
-- application holds; one that dies first gets every batch it held
-- counted (give_back). self: the consumer restoring, which is neither; nil
-- for anyone else.
local function notice_restart(self)
  local rid = run_id()
  if not rid then return end
  local known = redis.call('GET', pre .. 'runid')
  if known == rid then return end
  redis.call('SET', pre .. 'runid', rid)
  local rec = pre .. 'recover'
  redis.call('DEL', rec)
  if not known then return end
  redis.call('SET', pre .. 'recover_pause', 1, 'PX', 3000)
  local seen = redis.call('HGETALL', pre .. 'consumers')
  local last, others, all = 0, {}, {}
  for i = 2, #seen, 2 do last = math.max(last, tonumber(seen[i])) end
  for i = 1, #seen, 2 do
    if seen[i] ~= self then
      all[#all + 1] = seen[i]
      if tonumber(seen[i + 1]) + lease_ms() >= last then others[#others + 1] = seen[i] end
    end
  end
  if #others > 0 then
    redis.call('SADD', rec, unpack(others))
    redis.call('PEXPIRE', rec, lease_ms() + 2500)
  end
  if #all > 0 then redis.call('SADD', pre .. 'unsure', unpack(all)) end
end

-- Hands back every batch consumer cid holds, oldest next in line. A batch
-- its application received (handed) has one more delivery that ended
-- without an acknowledgement, counted in dlv; at maxd (> 0) it goes to
-- the dead letters instead. A batch that was only prefetched goes back as
-- it was. extra: ids the caller knows were handed (a closing consumer's).
-- A consumer unsure since a restart of Redis (notice_restart) may have
-- handed a batch whose mark was lost: each one it held counts a delivery
-- (flagged when it comes again), but none is dead-lettered for that.
local function give_back(cid, maxd, now, extra)
  local pending = pre .. 'pending:' .. cid
  if redis.call('LLEN', pending) == 0 then return 0 end
  notice_restart(nil)
  local unsure = redis.call('SISMEMBER', pre .. 'unsure', cid) == 1
  local rank = redis.call('HGET', pre .. 'crank', cid)
  -- A consumer with checkpoints (cckpt) serves a trainer that, after a
  -- crash, resumes from its checkpoint and trains again all it received
  -- since: its deaths say nothing against the batches it held, which come
  -- back counted (flagged) but never dead-lettered for it. Resumed again
  -- and again from one checkpoint, it would lose them otherwise, and a
  -- rank short of one batch falls out of step with the others.
  if redis.call('HEXISTS', pre .. 'cckpt', cid) == 1 then maxd = 0 end
  local n = 0
  while true do
    -- Newest first, each to the front: the oldest ends up next in line.
    local id = redis.call('LPOP', pending)
    if not id then break end
    local e = marker_epoch(id)
    local v = redis.call('HGET', pre .. 'dlv', id)
    if e then
      -- An end marker a BLMOVE moved here: back to its list.
      if true_marker(id, e) then redis.call('RPUSH', ready_key(e, rank), id) end
    elseif v then
      local d = tonumber(v)
      local got = handed(id) or extra[id]
      if got or unsure then
        d = d + 1
        redis.call('HSET', pre .. 'dlv', id, d)
        redis.call('PERSIST', pre .. 'b:' .. id)
      end
      if maxd > 0 and d >= maxd and (got or not unsure) then
        dead_letter(id, 'delivered ' .. d .. ' times without an acknowledgement', now)
      else
        redis.call('RPUSH', requeue_list(id, rank), id)
        n = n + 1
      end
    end
    -- (An id the queue no longer holds was acknowledged meanwhile.)
  end
  if n > 0 then redis.call('HINCRBY', pre .. 'stats', 'requeued', n) end
  return n
end

-- A producer's or consumer's counters when it leaves the registry (kind
-- 'p' or 'c': pstats:<id> or cstats:<id>): added into <kind>stats_gone,
-- with 'left' counting the peers folded, so that totals over the peers do
-- not drop as they go (the gauge 'epoch' is not added). tok: the process
-- token of one reaped while it may still live (frozen), whose figures are
-- then kept for an hour in <kind>gone:<id> (with 'tok'), so that they can
-- be taken out again if it comes back (unfold_stats); nil for one that
-- left for good.
local function fold_stats(kind, id, tok)
  local st = pre .. kind .. 'stats:' .. id
  local gone = pre .. kind .. 'stats_gone'
  local v = redis.call('HGETALL', st)
  local kept = {}
  for i = 1, #v, 2 do
    if v[i] ~= 'epoch' and string.match(v[i + 1], '^%d+$') and #v[i + 1] <= 18 then
      redis.call('HINCRBY', gone, v[i], v[i + 1])
      kept[#kept + 1] = v[i]
      kept[#kept + 1] = v[i + 1]
    end
  end
  redis.call('HINCRBY', gone, 'left', 1)
  redis.call('DEL', st)
  local t = pre .. kind .. 'gone:' .. id
  redis.call('DEL', t)
  if tok and tok ~= '' then
    redis.call('HSET', t, 'tok', tok, unpack(kept))
    redis.call('PEXPIRE', t, 3600000)
  end
end

-- Peer id, reaped while frozen, came back (the same process: tok) and
-- publishes its counters again: they leave <kind>stats_gone. Whatever
-- else is there (another process under the id) is just dropped.
local function unfold_stats(kind, id, tok)
  local t = pre .. kind .. 'gone:' .. id
  local v = redis.call('HGETALL', t)
  if #v == 0 then return end
  redis.call('DEL', t)
  local h = {}
  for i = 1, #v, 2 do h[v[i]] = v[i + 1] end
  if h.tok ~= tok then return end
  local gone = pre .. kind .. 'stats_gone'
  for f, x in pairs(h) do
    -- ('-0' is no integer to Redis.)
    if f ~= 'tok' and x ~= '0' then redis.call('HINCRBY', gone, f, '-' .. x) end
  end
  redis.call('HINCRBY', gone, 'left', -1)
end

-- Unregisters consumer cid, its counters folded (fold_stats); reaped: it
-- may be frozen and come back.
local function drop_consumer(cid, reaped)
  local rank = redis.call('HGET', pre .. 'crank', cid)
  if rank and redis.call('HGET', pre .. 'rholder', rank) == cid then
    redis.call('HDEL', pre .. 'rholder', rank)
  end
  local tok = redis.call('HGET', pre .. 'ctoken', cid)
  redis.call('HDEL', pre .. 'consumers', cid)
  redis.call('HDEL', pre .. 'ctoken', cid)
  redis.call('HDEL', pre .. 'crank', cid)
  redis.call('HDEL', pre .. 'cckpt', cid)
  redis.call('SREM', pre .. 'unsure', cid)
  fold_stats('c', cid, reaped and tok or nil)
end

-- Unregisters every producer silent for longer than the queue's lease
-- and at least 5 s (a producer beats every second: five beats missed),
-- dead or frozen (one that comes back registers again), its counters
-- folded. Its tasks are not touched: their own leases bring them back.
local function reap_producers(now, lease)
  local seen = redis.call('HGETALL', pre .. 'producers')
  local age = math.max(lease, 5000)
  for i = 1, #seen, 2 do
    if tonumber(seen[i + 1]) + age < now then
      redis.call('HDEL', pre .. 'producers', seen[i])
      fold_stats('p', seen[i], redis.call('HGET', pre .. 'ptoken', seen[i]) or '')
      redis.call('HDEL', pre .. 'ptoken', seen[i])
    end
  end
end

-- Hands back what consumer cid holds and forgets it.
local function reap_consumer(cid, now)
  local n = give_back(cid, max_deliveries(), now, {})
  drop_consumer(cid, true)
  return n
end

-- A consumer's sign of life: registers consumer cid, whose process holds
-- token tok, or renews its lease. fresh '1' is the process's first call.
-- Returns nil, or an error reply: LEASELOST when this process's lease ran
-- out (its batches went back to the queue, so it must drop what it
-- prefetched), HELD "<holder> <seen_ms> <text>" when the id, or the rank,
-- belongs to a consumer whose lease runs.
local function enter(cid, tok, fresh, rank, now)
  local lease = lease_ms()
  local cur = redis.call('HGET', pre .. 'ctoken', cid)
  if fresh ~= '1' then
    if cur == tok then
      redis.call('HSET', pre .. 'consumers', cid, now)
      return nil
    end
    if not cur then
      -- Reaped. What a BLMOVE moved in since goes back at once (it was
      -- never handed to the application).
      give_back(cid, 0, now, {})
    end
    return redis.error_reply('LEASELOST consumer ' .. cid .. ' was silent for longer than ' ..
                             'its lease of ' .. lease .. ' ms: the batches it held went ' ..
                             'back to the queue' .. (cur and ' (its id was taken over)' or ''))
  end
  if cur and cur ~= tok then
    local seen = tonumber(redis.call('HGET', pre .. 'consumers', cid) or '0')
    if seen + lease >= now then
      return redis.error_reply('HELD ' .. cid .. ' ' .. seen .. ' consumer id ' .. cid ..
                               ' is in use by a consumer seen ' .. (now - seen) .. ' ms ago')
    end
    reap_consumer(cid, now)
  end
  if rank ~= '' then
    local h = redis.call('HGET', pre .. 'rholder', rank)
    if h and h ~= cid then
      local seen = tonumber(redis.call('HGET', pre .. 'consumers', h) or '0')
      if seen + lease >= now then
        return redis.error_reply('HELD ' .. h .. ' ' .. seen .. ' rank ' .. rank ..
                                 ' is held by consumer ' .. h .. ', seen ' .. (now - seen) ..
                                 ' ms ago')
      end
      reap_consumer(h, now)
    end
    redis.call('HSET', pre .. 'rholder', rank, cid)
    redis.call('HSET', pre .. 'crank', cid, rank)
  end
  if not cur then
    -- Left by an earlier process under this id that nobody reaped (its
    -- registration was lost with Redis's last second, say).
    give_back(cid, max_deliveries(), now, {})
    -- A new process marks what it hands on the Redis it registers with.
    redis.call('SREM', pre .. 'unsure', cid)
    -- This process, reaped while frozen, is back: its counters are its
    -- own again.
    unfold_stats('c', cid, tok)
  end
  redis.call('HSET', pre .. 'ctoken', cid, tok)
  redis.call('HSET', pre .. 'consumers', cid, now)
  return nil
end

-- Posts the job's last end once no batch is held any more and every
-- earlier epoch has ended.
local post_markers
local function final_if_drained()
  local e = redis.call('HGET', jrun, 'final_pending')
  if e and held_count() == 0 and
     tonumber(redis.call('HGET', jrun, 'epoch_open') or '0') >= tonumber(e) then
    redis.call('HDEL', jrun, 'final_pending')
    post_markers(e, 'eof:' .. e)
  end
end

-- Pushes marker (unless nil: pushed already) into epoch e's list and moves
-- epoch_open past every epoch whose end is posted.
post_markers = function(e, marker)
  if marker then redis.call('LPUSH', ready_key(e, nil), marker) end
  local open = tonumber(redis.call('HGET', jrun, 'epoch_open') or '0')
  while redis.call('HEXISTS', pre .. 'eof', open) == 1 and
        redis.call('HGET', jrun, 'final_pending') ~= tostring(open) do
    open = open + 1
  end
  redis.call('HSET', jrun, 'epoch_open', open)
  if open >= tonumber(redis.call('HGET', job, 'epochs')) then
    redis.call('HSET', jrun, 'state', 'finished')
    -- Producers waiting for a task learn at once that none will come.
    wake_task_waiters()
  else
    final_if_drained()
  end
  wake_producers()
end

-- Posts the end of epoch e once every task of e is done or failed: in a
-- coordinated queue the last, incomplete round is dropped or padded first;
-- then an end marker goes behind the epoch's last batch in every list.
-- In a free queue the end of the job's last epoch waits until no batch is
-- held and every earlier epoch has ended (see final_if_drained).
local function epoch_end(e)
  local ntasks = tonumber(redis.call('HGET', job, 'ntasks') or '0')
  if ntasks == 0 then return end
  if tonumber(redis.call('HGET', pre .. 'edone', e) or '0') < ntasks then return end
  if redis.call('HSETNX', pre .. 'eof', e, 1) == 0 then return end
  if redis.call('HLEN', pre .. 'eof') >= tonumber(redis.call('HGET', job, 'epochs')) then
    -- Every task of every epoch is done (epochs may end out of order):
    -- producers may go.
    redis.call('HSET', jrun, 'state', 'finished')
    wake_task_waiters()
  end
  local cfg = redis.call('HMGET', meta, 'ranks', 'remainder')
  local n = tonumber(cfg[1] or '0')
  local marker = 'eof:' .. e
  if n > 0 then
    local stage = pre .. 'stage:' .. e
    local left = redis.call('LLEN', stage)
    if left > 0 and cfg[2] == 'pad' then
      local k = 0
      while redis.call('LLEN', stage) < n do
        local src = redis.call('LINDEX', stage, -1 - (k % left))
        k = k + 1
        local pad = src .. ':pad' .. k
        if caller == 'producers' then
          -- A producer creates frames through in: keys only (push); the
          -- copy passes through Lua, for at most ranks - 1 batches an epoch.
          local tmp = pre .. 'in:' .. pad
          redis.call('SET', tmp, redis.call('GET', pre .. 'b:' .. src))
          if redis.call('RENAMENX', tmp, pre .. 'b:' .. pad) == 0 then redis.call('DEL', tmp) end
        else
          redis.call('COPY', pre .. 'b:' .. src, pre .. 'b:' .. pad)
        end
        redis.call('HSET', pre .. 'dlv', pad, '0')
        redis.call('INCRBY', pre .. 'bytes', redis.call('STRLEN', pre .. 'b:' .. pad))
        redis.call('LPUSH', stage, pad)
        redis.call('HINCRBY', pre .. 'estats', e .. ':padded', '1')
      end
      for r = 0, n - 1 do
        redis.call('LMOVE', stage, ready_key(e, r), 'RIGHT', 'LEFT')
      end
    elseif left > 0 then
      local ids = redis.call('LRANGE', stage, 0, -1)
      if caller == 'producers' then
        -- A producer may not delete frames: the next reap of a consumer
        -- (or the next submit) forgets them (forget_dropped).
        redis.call('RPUSH', pre .. 'dropped', unpack(ids))
      else
        for _, id in ipairs(ids) do forget(id) end
      end
      redis.call('HINCRBY', pre .. 'estats', e .. ':dropped', #ids)
      redis.call('DEL', stage)
    end
    for r = 0, n - 1 do redis.call('LPUSH', ready_key(e, r), marker) end
    post_markers(e, nil)
    return
  end
  if tonumber(e) == tonumber(redis.call('HGET', job, 'epochs')) - 1 then
    if held_count() > 0 or
       tonumber(redis.call('HGET', jrun, 'epoch_open') or '0') < tonumber(e) then
      -- The job's last end waits for every batch to be acknowledged: a
      -- consumer that dies holding some hands them back after its lease,
      -- and no epoch would follow to deliver them in. ack, dead, reap and
      -- requeue post it once nothing is held (final_if_drained).
      redis.call('HSET', jrun, 'final_pending', e)
      return
    end
  end
  post_markers(e, marker)
end

-- A task leaves its producer without being done. counted: a failure its
-- producer reported, which counts an attempt; after max_attempts the task
-- is failed (its epoch can end without it). Otherwise it goes back to the
-- front of its epoch's waiting list as it was, with resume (when given)
-- the seq up to which its batches are known to be stored.
local function task_failed(t, err, counted, resume)
  local e = string.match(t, '^(%d+):')
  redis.call('ZREM', pre .. 'tlease', t)
  redis.call('HDEL', pre .. 'towner', t)
  redis.call('HDEL', pre .. 'trun', t)
  redis.call('HSET', pre .. 'terr', t, err)
  local att = tonumber(redis.call('HGET', pre .. 'tattempts', t) or '0')
  if not counted then
    redis.call('HINCRBY', pre .. 'tattempts', t, -1)
  end
  if resume and tonumber(resume) > tonumber(redis.call('HGET', pre .. 'tresume', t) or '0') then
    redis.call('HSET', pre .. 'tresume', t, resume)
  end
  if counted and att >= tonumber(redis.call('HGET', job, 'max_attempts') or '3') then
    redis.call('RPUSH', pre .. 'failed', t)
    redis.call('HINCRBY', pre .. 'edone', e, 1)
    redis.call('HINCRBY', pre .. 'estats', e .. ':failed_tasks', 1)
    epoch_end(e)
  else
    redis.call('LPUSH', tasks_key(e), t)
    redis.call('HINCRBY', jrun, 'twaiting', 1)
    if tonumber(e) < tonumber(redis.call('HGET', jrun, 'tscan') or '0') then
      redis.call('HSET', jrun, 'tscan', e)
    end
  end
  wake_task_waiters()
  -- A producer blocked on room with a later epoch's task may take it.
  wake_producers()
end

-- Returns every task whose lease ran out to the front of its epoch's
-- list: its producer died or froze, which is no failure of the task.
-- Crash loops are bounded apart: after max_crashes expiries the task is
-- failed ("producers died N times holding it").
local function reap_tasks(now)
  local n = 0
  for _, t in ipairs(redis.call('ZRANGEBYSCORE', pre .. 'tlease', '-inf', now, 'LIMIT', 0, 64)) do
    local owner = redis.call('HGET', pre .. 'towner', t) or '?'
    local d = redis.call('HINCRBY', pre .. 'tcrashes', t, 1)
    if d >= tonumber(redis.call('HGET', job, 'max_crashes') or '20') then
      -- Failed at once: make it the last counted attempt.
      redis.call('HSET', pre .. 'tattempts', t, redis.call('HGET', job, 'max_attempts') or '3')
      task_failed(t, 'producers died ' .. d .. ' times holding it (the last: producer ' ..
                  owner .. ')', true)
    else
      task_failed(t, 'lease expired: producer ' .. owner .. ' stopped renewing it', false)
    end
    n = n + 1
  end
  if n > 0 then redis.call('HINCRBY', pre .. 'stats', 'tasks_reaped', n) end
  return n
end

-- Checkpoints (checkpoint.lua). A consumer opened with checkpoints keeps
-- the frame of each batch it acknowledges, as ret:<id> (listed in
-- retained, id -> owner), and logs the id in clog:<owner>, newest first;
-- a checkpoint turns the log into its segment. Only the frames of batches
-- acknowledged since the oldest checkpoint kept are held: the segments of
-- older ones go to cdrop:<owner>, whose frames are forgotten a few at a
-- time. The acknowledgement bit stays set throughout: a task redone
-- drops these batches as it drops any acknowledged one.
local function retain(id, size, owner)
  redis.call('RENAME', pre .. 'b:' .. id, pre .. 'ret:' .. id)
  redis.call('PERSIST', pre .. 'ret:' .. id)
  redis.call('HSET', pre .. 'retained', id, owner)
  redis.call('INCRBY', pre .. 'retained_bytes', size)
  redis.call('LPUSH', pre .. 'clog:' .. owner, id)
  redis.call('SADD', pre .. 'cowners', owner)
end

-- Forgets retained frames for good.
local function unretain(ids)
  local keys, bytes = {}, 0
  for i, id in ipairs(ids) do
    keys[i] = pre .. 'ret:' .. id
    bytes = bytes + redis.call('STRLEN', keys[i])
  end
  redis.call('UNLINK', unpack(keys))
  redis.call('HDEL', pre .. 'retained', unpack(ids))
  redis.call('DECRBY', pre .. 'retained_bytes', bytes)
end

-- Forgets up to budget frames of owner's dropped segments; returns what
-- is left of budget.
local function ckpt_trim(owner, budget)
  local drop = pre .. 'cdrop:' .. owner
  while budget > 0 do
    local seg = redis.call('LINDEX', drop, 0)
    if not seg then break end
    local ids = redis.call('LPOP', seg, budget)
    if ids then
      unretain(ids)
      budget = budget - #ids
    end
    if redis.call('EXISTS', seg) == 0 then redis.call('LPOP', drop) end
  end
  return budget
end

-- Removes up to budget keys of every owner's checkpoints and retained
-- frames (a new job, or delete); returns {keys removed, true once none
-- is left}.
local function ckpt_clear(budget)
  local ids = redis.call('HRANDFIELD', pre .. 'retained', budget)
  if #ids > 0 then
    unretain(ids)
    return {#ids, false}
  end
  local n = 0
  for _, o in ipairs(redis.call('SPOP', pre .. 'cowners', math.max(1, math.floor(budget / 16)))) do
    local keys = {pre .. 'ckpt:' .. o, pre .. 'ckpts:' .. o, pre .. 'clog:' .. o,
                  pre .. 'cdrop:' .. o}
    for _, m in ipairs(redis.call('LRANGE', pre .. 'ckpts:' .. o, 0, -1)) do
      keys[#keys + 1] = pre .. 'cseg:' .. o .. ':' .. m
    end
    for _, k in ipairs(redis.call('LRANGE', pre .. 'cdrop:' .. o, 0, -1)) do
      keys[#keys + 1] = k
    end
    n = n + redis.call('UNLINK', unpack(keys))
  end
  if n == 0 and redis.call('SCARD', pre .. 'cowners') == 0 then
    redis.call('DEL', pre .. 'retained_bytes')
    return {0, true}
  end
  return {n, false}
end
