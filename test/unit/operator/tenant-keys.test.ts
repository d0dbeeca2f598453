import { describe, expect, it } from 'vitest';
import { workKeyOfSnapshotKey } from '../../../src/api/runner-snapshot.js';
import { tenantKeysOf } from '../../../src/operator/tenant-keys.js';
import { withSnapshotNotifications } from '../../../src/queue/snapshot-writes.js';
import { importerPod, runnerPod } from '../../support/vmop-pods.js';

describe("a namespace's runners and importers may write", () => {
  it('the snapshot and usage keys of its runner pods (a migration target its own) and the progress keys of its importer pods', () => {
    // vmop 0.1's runner pod (a StatefulSet's, adopted) has no component label.
    const legacy = runnerPod('team', 'old', 'old-0');
    delete legacy.metadata!.labels!['app.kubernetes.io/component'];
    const pods = [
      runnerPod('team', 'web', 'web-x1'),
      runnerPod('team', 'web', 'web-y2', true),
      importerPod('team', { vm: 'db' }, 'db-disk'),
      importerPod('team', { image: 'debian' }, 'image'),
      legacy,
    ];
    expect(tenantKeysOf('team', pods)).toEqual({
      runner: [
        'vmop:snapshot:vm:team/old',
        'vmop:snapshot:vm:team/old#usage',
        'vmop:snapshot:vm:team/web',
        'vmop:snapshot:vm:team/web#usage',
        'vmop:snapshot:vm:team/web@web-y2',
      ],
      importer: ['vmop:snapshot:image:team/debian#import/image', 'vmop:snapshot:vm:team/db#import/db-disk'],
    });
  });

  it('nothing for pods vmop did not make or of another namespace', () => {
    const own = runnerPod('team', 'web', 'web-x1');
    own.metadata!.labels!['app.kubernetes.io/managed-by'] = 'dora';
    const elsewhere = runnerPod('team-b', 'web', 'web-x1');
    expect(tenantKeysOf('team', [own, elsewhere])).toEqual({ runner: [], importer: [] });
  });
});

describe('a snapshot write reports on', () => {
  it('the VM or image of its key; a usage history on nothing', () => {
    expect(workKeyOfSnapshotKey('vmop:snapshot:vm:team/web')).toBe('vm:team/web');
    expect(workKeyOfSnapshotKey('vmop:snapshot:vm:team/web@web-y2')).toBe('vm:team/web');
    expect(workKeyOfSnapshotKey('vmop:snapshot:vm:team/db#import/db-disk')).toBe('vm:team/db');
    expect(workKeyOfSnapshotKey('vmop:snapshot:image:team/debian#import/image')).toBe('image:team/debian');
    expect(workKeyOfSnapshotKey('vmop:snapshot:vm:team/web#usage')).toBeUndefined();
    expect(workKeyOfSnapshotKey('vmop:snapshot:vmclass:big')).toBeUndefined();
    expect(workKeyOfSnapshotKey('vmop:snapshot:vm:team/web/x')).toBeUndefined();
  });

  it('when Redis notifies keyspace events of string commands, whatever else it was set to', () => {
    expect(withSnapshotNotifications('')).toBe('K$');
    expect(withSnapshotNotifications('Ex')).toBe('ExK$');
    expect(withSnapshotNotifications('KA')).toBe('KA');
    expect(withSnapshotNotifications('K$')).toBe('K$');
  });
});
