import 'reflect-metadata';
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Container, inject } from 'inversify';
import { MutatingWebhook, Reconciler, ValidatingWebhook } from './decorators.js';
import { defineKind } from './kind.js';
import { Registry, defaultRegistry, setDefaultRegistry, type Reconcile, type Request } from './registry.js';
import type { Result } from './errors.js';

const Widget = defineKind({ group: 'test.coil.example', version: 'v1', kind: 'Widget', plural: 'widgets', namespaced: true });
const Gadget = defineKind({ group: 'test.coil.example', version: 'v1', kind: 'Gadget', plural: 'gadgets', namespaced: true });
const GREETING = Symbol('greeting');

describe('decorators', () => {
  it('record a reconciler with its options into the given registry only', () => {
    const registry = new Registry();
    const before = defaultRegistry().reconcilers.length;
    @Reconciler({ name: 'widget', for: Widget, owns: [Gadget], maxConcurrentReconciles: 4, registry })
    class WidgetReconciler implements Reconcile {
      async reconcile(_req: Request): Promise<Result> {
        return {};
      }
    }
    assert.equal(registry.reconcilers.length, 1);
    assert.equal(registry.reconcilers[0]!.target, WidgetReconciler);
    assert.equal(registry.reconcilers[0]!.for, Widget);
    assert.deepEqual(registry.reconcilers[0]!.owns, [Gadget]);
    assert.equal(defaultRegistry().reconcilers.length, before);
  });

  it('record into a swapped default registry and restore it', () => {
    const mine = new Registry();
    const previous = setDefaultRegistry(mine);
    try {
      @Reconciler({ name: 'gadget', for: Gadget })
      class GadgetReconciler implements Reconcile {
        async reconcile(): Promise<Result> {
          return {};
        }
      }
      assert.equal(mine.reconcilers[0]?.target, GadgetReconciler);
    } finally {
      setDefaultRegistry(previous);
    }
    assert.equal(defaultRegistry(), previous);
  });

  it('reject a duplicate or non-label-safe reconciler name', () => {
    const registry = new Registry();
    const define = (name: string) => {
      @Reconciler({ name, for: Widget, registry })
      class R implements Reconcile {
        async reconcile(): Promise<Result> {
          return {};
        }
      }
      return R;
    };
    define('w');
    assert.throws(() => define('w'), /duplicate reconciler name w/);
    assert.throws(() => define('Bad Name'), /not a valid metric label/);
  });

  it('record webhooks with GVK-derived paths and defaults left to the config builder', () => {
    const registry = new Registry();
    @ValidatingWebhook({ for: Widget, registry })
    class V {
      validateCreate() {
        return [];
      }
    }
    @MutatingWebhook({ for: Widget, operations: ['CREATE'], registry })
    class M {
      default() {}
    }
    assert.deepEqual(
      registry.webhooks.map((w) => [w.type, w.path, w.target]),
      [
        ['validating', '/validate-test-coil-example-v1-widget', V],
        ['mutating', '/mutate-test-coil-example-v1-widget', M],
      ],
    );
  });

  it('make the class resolvable by inversify with explicit @inject parameters', () => {
    const registry = new Registry();
    @Reconciler({ name: 'injected', for: Widget, registry })
    class Injected implements Reconcile {
      constructor(@inject(GREETING) readonly greeting: string) {}
      async reconcile(): Promise<Result> {
        return {};
      }
    }
    const c = new Container();
    c.bind(GREETING).toConstantValue('hello');
    c.bind(Injected).toSelf();
    assert.equal(c.get(Injected).greeting, 'hello');
  });
});
